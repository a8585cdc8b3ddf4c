//! The control plane under `/api/workflows`, with the run-targeted
//! variants under `/runs/{runId}/`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{Extension, Json, Router};

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::waiting::Target;
use super::{blocking, refuse, with_body_status, Scope, Shared};
use crate::server::message_streams::MessageBody;
use crate::server::redrive::RedriveBody;
use crate::server::wire::{HistoryQuery, ListQuery, SignalBody, StartWorkflow, StopBody};
use crate::server::{ApiError, Engine};

pub(super) fn routes() -> Router<Arc<Engine>> {
    let signal = targeted(StatusCode::ACCEPTED, |e, ns, t, b: SignalBody| {
        e.signal(ns, &t.workflow_id, t.run_id.as_deref(), &t.name, b)
    });
    // Queries and waiting updates await without a thread (`waiting`).
    let update = post(super::waiting::update);
    let query = post(super::waiting::query);
    let cancel = targeted(StatusCode::OK, |e, ns, t, b: StopBody| {
        e.stop(ns, &t.workflow_id, t.run_id.as_deref(), false, b)
    });
    let terminate = targeted(StatusCode::OK, |e, ns, t, b: StopBody| {
        e.stop(ns, &t.workflow_id, t.run_id.as_deref(), true, b)
    });
    let message = targeted(StatusCode::ACCEPTED, |e, ns, t, b: MessageBody| {
        e.append_message_stream(ns, &t.workflow_id, &t.name, b)
    });
    let request_cancellation = targeted(
        StatusCode::OK,
        |e, ns, t, b: crate::server::cancellation::RequestCancellationBody| {
            e.request_cancellation(ns, &t.workflow_id, t.run_id.as_deref(), b)
        },
    );
    let archive = targeted(StatusCode::OK, |e, ns, t, b: StopBody| {
        e.archive(ns, &t.workflow_id, t.run_id.as_deref(), b)
    });
    Router::new()
        .route("/api/workflows", post(start).get(list))
        // The import's static path shadows `{wf}` for a workflow called
        // `import`; its describe is served here (the import takes only POST,
        // a describe only GET). Deeper paths fall through to `{wf}` routes.
        .route("/api/workflows/import", post(import).get(describe_import))
        .route("/api/workflows/{wf}", get(describe))
        .route("/api/workflows/{wf}/runs", get(runs))
        .route("/api/workflows/{wf}/runs/{run}", get(describe))
        .route("/api/workflows/{wf}/runs/{run}/history", get(history))
        .route("/api/workflows/{wf}/signal/{name}", signal.clone())
        .route("/api/workflows/{wf}/runs/{run}/signal/{name}", signal)
        .route(
            "/api/workflows/{wf}/message-streams/{name}/messages",
            message,
        )
        .route("/api/workflows/{wf}/update/{name}", update.clone())
        .route("/api/workflows/{wf}/runs/{run}/update/{name}", update)
        .route("/api/workflows/{wf}/query/{name}", query.clone())
        .route("/api/workflows/{wf}/runs/{run}/query/{name}", query)
        .route("/api/workflows/{wf}/cancel", cancel.clone())
        .route("/api/workflows/{wf}/runs/{run}/cancel", cancel)
        .route(
            "/api/workflows/{wf}/request-cancellation",
            request_cancellation.clone(),
        )
        .route(
            "/api/workflows/{wf}/runs/{run}/request-cancellation",
            request_cancellation,
        )
        .route("/api/workflows/{wf}/terminate", terminate.clone())
        .route("/api/workflows/{wf}/runs/{run}/terminate", terminate)
        .route("/api/workflows/{wf}/archive", archive.clone())
        .route("/api/workflows/{wf}/runs/{run}/archive", archive)
        .route("/api/workflows/{wf}/runs/{run}/redrive", post(redrive))
}

type TargetedOp<T> = fn(&Engine, &str, &Target, T) -> Result<Value, ApiError>;

/// A POST on a targeted route: the body parsed as `T`, then `op` on the
/// blocking pool, answering `status` on success.
fn targeted<T: DeserializeOwned + Send + 'static>(
    status: StatusCode,
    op: TargetedOp<T>,
) -> MethodRouter<Arc<Engine>> {
    post(
        move |State(engine): Shared,
              Extension(scope): Extension<Scope>,
              Path(params): Path<HashMap<String, String>>,
              headers: HeaderMap,
              body: Body| async move {
            let target = Target::from_path(params);
            with_body_status(status, engine, headers, body, move |e, b: T| {
                op(e, &scope.namespace, &target, b)
            })
            .await
        },
    )
}

async fn start(State(engine): Shared, request: Request) -> Response {
    // The request taken whole, not as `HeaderMap` and `Body`: axum's
    // `HeaderMap` extractor clones the map, and the clone's build and drop
    // were about 2.5 % of the runtime threads' instructions per start
    // (docs/performance.md, "A start's round trip"). The scope is taken
    // out of it, not cloned as the `Extension` extractor would.
    let (mut parts, body) = request.into_parts();
    let Some(scope) = parts.extensions.remove::<Scope>() else {
        return refuse(ApiError::Internal(
            "a start without its namespace scope".into(),
        ));
    };
    let parsed = match super::read::<StartWorkflow>(&engine, &parts.headers, body).await {
        Ok(parsed) => parsed,
        Err(e) => return refuse(e),
    };
    // Most starts are checked here and await the writer without a
    // blocking thread; the others start there.
    let answer = match engine.start_workflow_now(&scope.namespace, parsed).await {
        Ok(answer) => answer,
        Err(parsed) => {
            super::run_blocking(engine, move |e| {
                e.start_answer(&scope.namespace, parsed, None)?
                    .ok_or_else(|| ApiError::Internal("an ungated start was gated".into()))
            })
            .await
        }
    };
    // Serialized straight from the answer's struct, no JSON map between.
    match answer {
        Ok((status, answer)) => start_reply(
            StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
            &answer,
        ),
        Err(e) => refuse(e),
    }
}

/// The headers a start's answer map has room for: its own three and a
/// client's next request (an SDK sends about ten).
const REPLY_HEADERS: usize = 12;

/// A start's answer as `axum::Json` writes it (the same bytes and
/// `Content-Type`), into a `Vec` sized for it up front: `Json` writes
/// through a `BytesMut` writer that starts at 128 bytes and grows, and
/// answers carry their content type twice over (octet-stream, replaced).
/// Both cost a start about 2 % of the runtime threads' instructions
/// (docs/performance.md, "A start's round trip").
fn start_reply(status: StatusCode, answer: &crate::server::wire::StartAnswer) -> Response {
    let mut body = Vec::with_capacity(512);
    if let Err(e) = answer.write_json(&mut body) {
        return refuse(ApiError::Internal(format!("the start's answer: {e}")));
    }
    let mut response = Body::from(body).into_response();
    *response.status_mut() = status;
    // hyper keeps the answer's header map for the connection's next
    // request: sized for that request's headers here, it is not grown
    // twice while the next start's head is parsed (docs/performance.md,
    // "the gate's copies").
    *response.headers_mut() = HeaderMap::with_capacity(REPLY_HEADERS);
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    response
}

async fn import(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    chosen_status(engine, scope, headers, body, Engine::import_v1).await
}

/// An operation that answers its own success status with the body.
type StatusOp<T> = fn(&Engine, &str, T) -> Result<(u16, Value), ApiError>;

/// A namespace-scoped POST whose operation picks its success status
/// (201 created, 200 for a retried start, a dry run or an existing run).
pub(super) async fn chosen_status<T: DeserializeOwned + Send + 'static>(
    engine: Arc<Engine>,
    scope: Scope,
    headers: HeaderMap,
    body: Body,
    op: StatusOp<T>,
) -> Response {
    let parsed = match super::read::<T>(&engine, &headers, body).await {
        Ok(parsed) => parsed,
        Err(e) => return refuse(e),
    };
    match super::run_blocking(engine, move |e| op(e, &scope.namespace, parsed)).await {
        Ok((status, value)) => super::reply_with(
            StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
            Ok(value),
        ),
        Err(e) => refuse(e),
    }
}

/// A failed run's redrive: `202` with the successor it started, `200` for
/// a retried request id.
async fn redrive(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let parsed = match super::read::<RedriveBody>(&engine, &headers, body).await {
        Ok(parsed) => parsed,
        Err(e) => return refuse(e),
    };
    match super::run_blocking(engine, move |e| {
        e.redrive(&scope.namespace, &wf, &run, parsed)
    })
    .await
    {
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
    Path(params): Path<HashMap<String, String>>,
) -> Response {
    let target = Target::from_path(params);
    // Most describes are answered here, without a blocking thread.
    if let Some(answer) = engine.describe_now(
        &scope.namespace,
        &target.workflow_id,
        target.run_id.as_deref(),
    ) {
        // Serialized straight from the struct, without a Value tree.
        return match answer {
            Ok(description) => Json(description).into_response(),
            Err(e) => refuse(e),
        };
    }
    blocking(engine, move |e| {
        e.describe(
            &scope.namespace,
            &target.workflow_id,
            target.run_id.as_deref(),
        )
    })
    .await
}

async fn describe_import(State(engine): Shared, Extension(scope): Extension<Scope>) -> Response {
    blocking(engine, move |e| {
        e.describe(&scope.namespace, "import", None)
    })
    .await
}

async fn runs(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(wf): Path<String>,
) -> Response {
    blocking(engine, move |e| e.list_runs(&scope.namespace, &wf)).await
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

#[cfg(test)]
mod tests {
    use axum::response::IntoResponse;

    use super::*;
    use crate::server::http::response_parts;
    use crate::server::wire::StartAnswer;

    /// The start's answer is written as `axum::Json` wrote it: the same
    /// status, headers and bytes, for a new run and a retried one.
    #[tokio::test]
    async fn a_start_reply_is_the_json_reply_it_replaced() {
        let mut answer = StartAnswer {
            duplicate: Some(false),
            namespace: "bench".into(),
            outcome: "started",
            payload_codec: "json".into(),
            run_id: "17".into(),
            status: "running",
            task_queue: "q".into(),
            workflow_id: format!("w-\"{}\"-\u{e9}", "x".repeat(600)),
            workflow_type: "Order".into(),
        };
        for status in [StatusCode::CREATED, StatusCode::OK] {
            let new = response_parts(start_reply(status, &answer)).await;
            let old = response_parts((status, axum::Json(answer.clone())).into_response()).await;
            assert_eq!(new, old);
            assert_eq!(new.1.len(), 1, "{:?}", new.1);
            answer.duplicate = None;
        }
    }
}
