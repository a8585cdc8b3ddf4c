//! `/api/bridge-adapters/webhook/{adapter}`: signed webhook deliveries.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use super::waiting::update_outcome;
use super::{read_bytes, refuse, run_blocking, Shared};
use crate::server::webhook_intake::Delivery;
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
    let delivered = run_blocking(engine.clone(), move |e| {
        Ok(e.webhook_delivery(&adapter, signed, &bytes))
    })
    .await;
    let (status, body) = match delivered {
        Ok(Delivery::Answered(status, body)) => (status, body),
        // An update with `wait_for: completed` awaits its outcome without a
        // thread, as the control plane's does.
        Ok(Delivery::Waiting(pending, base)) => {
            let outcome = update_outcome(&engine, &pending).await;
            engine.webhook_update_answer(pending, base, outcome)
        }
        Err(e) => return refuse(e),
    };
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        Json(body),
    )
        .into_response()
}
