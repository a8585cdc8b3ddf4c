//! `/api/bridge-adapters/webhook/{adapter}`: signed webhook deliveries.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use super::{read_bytes, refuse, run_blocking, Shared};
use crate::server::webhooks::{Signed, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use crate::server::Engine;

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new().route("/api/bridge-adapters/webhook/{adapter}", post(deliver))
}

async fn deliver(
    State(engine): Shared,
    Path(adapter): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let signed = Signed {
        timestamp: header(TIMESTAMP_HEADER),
        signature: header(SIGNATURE_HEADER),
    };
    // The payload limit holds before the signature is checked.
    let bytes = match read_bytes(&engine, &headers, body).await {
        Ok(bytes) => bytes,
        Err(e) => return refuse(e),
    };
    let answered = run_blocking(engine, move |e| {
        Ok(e.webhook_delivery(&adapter, signed, &bytes))
    })
    .await;
    match answered {
        Ok((status, body)) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            Json(body),
        )
            .into_response(),
        Err(e) => refuse(e),
    }
}
