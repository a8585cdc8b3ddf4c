//! `POST /api/external-payloads/v1` and `GET /api/external-payloads/v1/{referenceId}`:
//! raw payload bytes in and out, in the caller's namespace, with the
//! integrity headers the SDK sends and checks.

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};

use super::{refuse, run_blocking, Scope, Shared};
use crate::external_payloads::{CODEC_HEADER, SHA256_HEADER, SIZE_HEADER};
use crate::server::external_payloads::UploadHeaders;
use crate::server::{ApiError, Engine};

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/external-payloads/v1", post(upload))
        .route("/api/external-payloads/v1/{reference}", get(fetch))
}

fn declared(headers: &HeaderMap) -> UploadHeaders {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    UploadHeaders {
        codec: text(CODEC_HEADER),
        size: text(SIZE_HEADER),
        sha256: text(SHA256_HEADER),
    }
}

async fn upload(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The transport's own limit, not the JSON body limit: refuse a declared
    // length over it before reading, and never buffer more than limit + 1.
    let limit = engine.config.external_payloads.max_payload_bytes;
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if let Some(length) = length {
        if let Err(e) = engine.check_payload_length(length) {
            return refuse(e);
        }
    }
    let cap = usize::try_from(limit.saturating_add(1)).unwrap_or(usize::MAX);
    let data = match to_bytes(body, cap).await {
        Ok(bytes) => bytes.to_vec(),
        Err(e) if crate::server::serve::is_body_timeout(&e) => {
            return refuse(ApiError::BodyTimedOut(e.to_string()));
        }
        Err(_) => {
            return refuse(
                engine
                    .check_payload_length(limit.saturating_add(1))
                    .err()
                    .unwrap_or(ApiError::Malformed("unreadable payload body".into())),
            )
        }
    };
    let declared = declared(&headers);
    let answer = run_blocking(engine, move |e| {
        e.upload_external_payload(&scope.namespace, declared, data)
    })
    .await;
    match answer {
        Ok((status, body)) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
            Json(body),
        )
            .into_response(),
        Err(e) => refuse(e),
    }
}

async fn fetch(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(reference): Path<String>,
    headers: HeaderMap,
) -> Response {
    let expected = declared(&headers);
    let found = run_blocking(engine, move |e| {
        e.fetch_external_payload(&scope.namespace, &reference, expected)
    })
    .await;
    let (record, data) = match found {
        Ok(found) => found,
        Err(e) => return refuse(e),
    };
    let mut response = (StatusCode::OK, data).into_response();
    let out = response.headers_mut();
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    for (name, value) in [
        (CODEC_HEADER, record.codec),
        (SIZE_HEADER, record.size_bytes.to_string()),
        (SHA256_HEADER, record.sha256),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            out.insert(name, value);
        }
    }
    response
}
