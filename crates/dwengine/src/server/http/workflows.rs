//! The control plane under `/api/workflows`, with the run-targeted
//! variants under `/runs/{runId}/`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};

use super::{blocking, refuse, with_body, with_body_status, Scope, Shared};
use crate::server::wire::{
    HistoryQuery, ListQuery, QueryBody, SignalBody, StartWorkflow, StopBody, UpdateBody,
};
use crate::server::{ApiError, Engine};

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/workflows", post(start).get(list))
        .route("/api/workflows/{wf}", get(describe))
        .route("/api/workflows/{wf}/runs", get(runs))
        .route("/api/workflows/{wf}/runs/{run}", get(describe_run))
        .route("/api/workflows/{wf}/runs/{run}/history", get(history))
        .route("/api/workflows/{wf}/signal/{name}", post(signal))
        .route(
            "/api/workflows/{wf}/runs/{run}/signal/{name}",
            post(signal_run),
        )
        .route("/api/workflows/{wf}/update/{name}", post(update))
        .route(
            "/api/workflows/{wf}/runs/{run}/update/{name}",
            post(update_run),
        )
        .route("/api/workflows/{wf}/query/{name}", post(query))
        .route(
            "/api/workflows/{wf}/runs/{run}/query/{name}",
            post(query_run),
        )
        .route("/api/workflows/{wf}/cancel", post(cancel))
        .route("/api/workflows/{wf}/runs/{run}/cancel", post(cancel_run))
        .route("/api/workflows/{wf}/terminate", post(terminate))
        .route(
            "/api/workflows/{wf}/runs/{run}/terminate",
            post(terminate_run),
        )
}

async fn start(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = super::read::<StartWorkflow>(&engine, &headers, body).await;
    let parsed = match result {
        Ok(parsed) => parsed,
        Err(e) => return refuse(e),
    };
    match super::run_blocking(engine, move |e| e.start_workflow(&scope.namespace, parsed)).await {
        Ok((status, value)) => super::reply_with(
            StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
            Ok(value),
        ),
        Err(e) => refuse(e),
    }
}

async fn list(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    match query {
        Ok(Query(q)) => blocking(engine, move |e| e.list_workflows(&scope.namespace, q)).await,
        Err(e) => refuse(ApiError::Malformed(e.body_text())),
    }
}

async fn describe(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(wf): Path<String>,
) -> Response {
    blocking(engine, move |e| e.describe(&scope.namespace, &wf, None)).await
}

async fn runs(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(wf): Path<String>,
) -> Response {
    blocking(engine, move |e| e.list_runs(&scope.namespace, &wf)).await
}

async fn describe_run(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run)): Path<(String, String)>,
) -> Response {
    blocking(engine, move |e| {
        e.describe(&scope.namespace, &wf, Some(&run))
    })
    .await
}

async fn history(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run)): Path<(String, String)>,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Response {
    match query {
        Ok(Query(q)) => blocking(engine, move |e| e.history(&scope.namespace, &wf, &run, q)).await,
        Err(e) => refuse(ApiError::Malformed(e.body_text())),
    }
}

/// Which workflow (and optionally which run) a message targets.
struct Target {
    namespace: String,
    workflow_id: String,
    run_id: Option<String>,
    name: String,
}

async fn signal(
    state: Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    signal_to(state, target(scope, wf, None, name), headers, body).await
}

async fn signal_run(
    state: Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    signal_to(state, target(scope, wf, Some(run), name), headers, body).await
}

fn target(scope: Scope, workflow_id: String, run_id: Option<String>, name: String) -> Target {
    Target {
        namespace: scope.namespace,
        workflow_id,
        run_id,
        name,
    }
}

async fn signal_to(State(engine): Shared, t: Target, headers: HeaderMap, body: Body) -> Response {
    with_body_status(
        StatusCode::ACCEPTED,
        engine,
        headers,
        body,
        move |e, b: SignalBody| {
            e.signal(
                &t.namespace,
                &t.workflow_id,
                t.run_id.as_deref(),
                &t.name,
                b,
            )
        },
    )
    .await
}

async fn update(
    state: Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    update_to(state, target(scope, wf, None, name), headers, body).await
}

async fn update_run(
    state: Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    update_to(state, target(scope, wf, Some(run), name), headers, body).await
}

async fn update_to(State(engine): Shared, t: Target, headers: HeaderMap, body: Body) -> Response {
    with_body(engine, headers, body, move |e, b: UpdateBody| {
        e.update(
            &t.namespace,
            &t.workflow_id,
            t.run_id.as_deref(),
            &t.name,
            b,
        )
    })
    .await
}

async fn query(
    state: Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    query_to(state, target(scope, wf, None, name), headers, body).await
}

async fn query_run(
    state: Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    query_to(state, target(scope, wf, Some(run), name), headers, body).await
}

async fn query_to(State(engine): Shared, t: Target, headers: HeaderMap, body: Body) -> Response {
    with_body(engine, headers, body, move |e, b: QueryBody| {
        e.query(
            &t.namespace,
            &t.workflow_id,
            t.run_id.as_deref(),
            &t.name,
            b,
        )
    })
    .await
}

async fn cancel(
    state: Shared,
    Extension(scope): Extension<Scope>,
    Path(wf): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    stop(
        false,
        state,
        target(scope, wf, None, String::new()),
        headers,
        body,
    )
    .await
}

async fn cancel_run(
    state: Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    stop(
        false,
        state,
        target(scope, wf, Some(run), String::new()),
        headers,
        body,
    )
    .await
}

async fn terminate(
    state: Shared,
    Extension(scope): Extension<Scope>,
    Path(wf): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    stop(
        true,
        state,
        target(scope, wf, None, String::new()),
        headers,
        body,
    )
    .await
}

async fn terminate_run(
    state: Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    stop(
        true,
        state,
        target(scope, wf, Some(run), String::new()),
        headers,
        body,
    )
    .await
}

/// Cancel and terminate differ only in the terminal status.
async fn stop(
    terminate: bool,
    State(engine): Shared,
    t: Target,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: StopBody| {
        e.stop(
            &t.namespace,
            &t.workflow_id,
            t.run_id.as_deref(),
            terminate,
            b,
        )
    })
    .await
}
