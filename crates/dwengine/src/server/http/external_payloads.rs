//! `POST /api/external-payloads/v1` and `GET /api/external-payloads/v1/{referenceId}`:
//! raw payload bytes in and out, in the caller's namespace, with the
//! integrity headers the SDK sends and checks.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use http_body_util::BodyExt;

use super::{refuse, run_blocking, Scope, Shared};
use crate::external_payloads::{CODEC_HEADER, SHA256_HEADER, SIZE_HEADER};
use crate::server::external_payloads::{spool, UploadHeaders};
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

/// Chunks in flight between the body and the spool file: with hyper's
/// frames of at most a few hundred KiB, an upload holds well under a MiB
/// in memory whatever its size.
const SPOOL_CHUNKS_IN_FLIGHT: usize = 4;

async fn upload(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The transport's own limit, not the JSON body limit: refuse a declared
    // length over it (and a transport that is off, a wrong codec) before
    // reading, then stream the body to a spool file, never more than
    // limit + 1 bytes, hashing it on the way.
    let declared = declared(&headers);
    let limit = engine.config.external_payloads.max_payload_bytes;
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    let early = engine
        .precheck_upload(&declared)
        .and_then(|()| match length {
            Some(length) => engine.check_payload_length(length),
            None => Ok(()),
        });
    if let Err(e) = early {
        return refuse(e);
    }
    let (chunks, received) = tokio::sync::mpsc::channel(SPOOL_CHUNKS_IN_FLIGHT);
    let dir = engine.upload_spool_dir();
    let spooling = tokio::task::spawn_blocking(move || spool(&dir, received));
    let mut body = body;
    let mut size = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) if crate::server::body_deadline::is_body_timeout(&e) => {
                return refuse(ApiError::BodyTimedOut(e.to_string()));
            }
            Err(e) => {
                return refuse(ApiError::Malformed(format!("unreadable payload body: {e}")));
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        size += data.len() as u64;
        if size > limit {
            // Dropping the sender ends the spool; its file is removed.
            return refuse(
                engine
                    .check_payload_length(size)
                    .err()
                    .unwrap_or(ApiError::Malformed("oversized payload body".into())),
            );
        }
        if chunks.send(data).await.is_err() {
            break;
        }
    }
    drop(chunks);
    let spooled = match spooling.await {
        Ok(Ok(spooled)) => spooled,
        Ok(Err(e)) => {
            return refuse(ApiError::Internal(format!(
                "spooling the upload to {}: {e}",
                engine.upload_spool_dir().display()
            )))
        }
        Err(e) => return refuse(ApiError::Internal(e.to_string())),
    };
    let answer = run_blocking(engine, move |e| {
        e.upload_spooled_payload(&scope.namespace, declared, spooled)
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
    let found = run_blocking(engine.clone(), move |e| {
        e.fetch_external_payload(&scope.namespace, &reference, expected)
    })
    .await;
    let record = match found {
        Ok(found) => found,
        Err(e) => return refuse(e),
    };
    // The bytes follow a chunk at a time, each read on the blocking pool
    // through a read connection, never the whole payload in memory.
    let (chunks, body) = tokio::sync::mpsc::channel(2);
    let (id, size) = (record.reference_id.clone(), record.size_bytes);
    tokio::task::spawn_blocking(move || {
        let mut offset = 0u64;
        while offset < size {
            let read = engine.read(|store| store.external_payload_chunk(&id, offset, FETCH_CHUNK));
            let chunk = match read {
                Ok(Some(chunk)) if !chunk.is_empty() => chunk,
                // Gone (or cut short) mid-read: the body ends in an error,
                // so the client sees a short answer, never a wrong one.
                Ok(_) => {
                    let gone = std::io::Error::other("the payload was deleted while it was read");
                    let _ = chunks.blocking_send(Err(gone));
                    return;
                }
                Err(e) => {
                    let _ = chunks.blocking_send(Err(std::io::Error::other(e.to_string())));
                    return;
                }
            };
            offset += chunk.len() as u64;
            if chunks.blocking_send(Ok(bytes::Bytes::from(chunk))).is_err() {
                return;
            }
        }
    });
    let mut response = (StatusCode::OK, Body::new(ChunkBody(body))).into_response();
    response.headers_mut().insert(
        header::CONTENT_LENGTH,
        HeaderValue::from_str(&size.to_string()).unwrap_or(HeaderValue::from_static("0")),
    );
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

/// Bytes of a payload read at once when it is fetched.
const FETCH_CHUNK: usize = 256 * 1024;

/// A response body fed a chunk at a time from a blocking reader.
struct ChunkBody(tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>);

impl hyper::body::Body for ChunkBody {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| c.map(hyper::body::Frame::data)))
    }
}
