//! `/api/workflows/{id}/runs/{run}/streams`: a run's output streams —
//! list, describe, append, read pages (with a bounded wait) and close.
//!
//! A page read that finds nothing waits without holding a thread: it
//! sleeps on the async runtime until its run changes (a wake-up) or a
//! growing interval passes (50 ms up to 1 s), then re-reads the store on
//! the stream lane (a few threads of its own, [`super::on_stream_lane`]),
//! until an item arrives, the stream ends, or `wait_seconds` pass. A node holds at most
//! `DW_WORKFLOW_STREAM_MAX_WAITS` such waits (429 past it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};

use super::{blocking, on_stream_lane, refuse, reply, run_blocking, with_body, Scope, Shared};
use crate::server::streams::{AppendStreamBody, CloseStreamBody, StreamPageQuery};
use crate::server::{ApiError, Engine};
use crate::waiters::{Backoff, WaitKey};

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/workflows/{wf}/runs/{run}/streams", get(list))
        .route(
            "/api/workflows/{wf}/runs/{run}/streams/{name}",
            get(describe),
        )
        .route(
            "/api/workflows/{wf}/runs/{run}/streams/{name}/items",
            get(page).post(append),
        )
        .route(
            "/api/workflows/{wf}/runs/{run}/streams/{name}/close",
            post(close),
        )
}

async fn list(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run)): Path<(String, String)>,
) -> Response {
    blocking(engine, move |e| e.list_streams(&scope.namespace, &wf, &run)).await
}

async fn describe(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run, name)): Path<(String, String, String)>,
) -> Response {
    blocking(engine, move |e| {
        e.describe_stream(&scope.namespace, &wf, &run, &name)
    })
    .await
}

async fn append(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: AppendStreamBody| {
        e.append_stream(&scope.namespace, &wf, &run, &name, b)
    })
    .await
}

async fn close(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: CloseStreamBody| {
        e.close_stream(&scope.namespace, &wf, &run, &name, b)
    })
    .await
}

async fn page(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run, name)): Path<(String, String, String)>,
    query: Result<Query<StreamPageQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(q)) => q,
        Err(e) => return refuse(ApiError::Malformed(e.body_text())),
    };
    let (w, n) = (wf.clone(), name.clone());
    let may_wait = query.wait_seconds.is_some_and(|s| s > 0);
    let resolve = move |e: &Engine| e.stream_page_spec(&scope.namespace, &w, &run, &n, &query);
    let spec = match if may_wait {
        on_stream_lane(engine.clone(), resolve).await
    } else {
        run_blocking(engine.clone(), resolve).await
    } {
        Ok(spec) => spec,
        Err(e) => return refuse(e),
    };
    let deadline = Instant::now() + Duration::from_secs(spec.wait_seconds);
    let mut held = None;
    // Woken by any change of the run (an append or close through the
    // control plane, a workflow task's completion, the run's end), on this
    // node at once and on others through the relay; a look at a growing
    // interval (50 ms up to 1 s) catches a wake-up that was lost.
    let waiters = engine.waiters().clone();
    let subscription = may_wait.then(|| waiters.subscribe(WaitKey::Run(spec.run.0)));
    let mut backoff = Backoff::new();
    loop {
        let woken = subscription.as_ref().map(|s| s.notify().notified());
        tokio::pin!(woken);
        if let Some(woken) = woken.as_mut().as_pin_mut() {
            // Enabled before the read, so a wake-up during it is not lost.
            woken.enable();
        }
        let (w, n) = (wf.clone(), name.clone());
        // A read that may wait runs on the stream lane, its first look
        // included, so waiting reads never add threads; one that does not
        // wait on the shared pool as any request.
        let read = if !may_wait {
            run_blocking(engine.clone(), move |e| e.stream_page(&w, &n, spec)).await
        } else {
            on_stream_lane(engine.clone(), move |e| e.stream_page(&w, &n, spec)).await
        };
        match read {
            Ok((page, ready)) if ready || Instant::now() >= deadline || waiters.stopping() => {
                return reply(Ok(page))
            }
            Ok(_) if held.is_none() => match engine.stream_waits.hold() {
                Ok(wait) => held = Some(wait),
                Err(e) => return refuse(e),
            },
            Ok(_) => {}
            Err(e) => return refuse(e),
        }
        let pause = backoff
            .step()
            .min(deadline.saturating_duration_since(Instant::now()));
        match woken.as_mut().as_pin_mut() {
            Some(woken) => tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep(pause) => {}
                _ = waiters.stopped() => {}
            },
            None => tokio::time::sleep(pause).await,
        }
    }
}
