//! The HTTP adapter: routes, the request gate, body limits, JSON in and out.
//!
//! Every request first passes [`gate`]: the `Host` check, bearer-token
//! auth by plane, `Content-Type: application/json` on bodies, the protocol
//! version headers (checked, then echoed on the answer) and the namespace
//! from `X-Namespace`. Handlers then only read the request, enforce the
//! body-size limit before parsing, and run the matching [`Engine`] method
//! on the blocking pool (the store and the Redis client are blocking); all
//! decisions live in the engine modules. One module per resource.

mod discovery;
mod external_payloads;
mod schedules;
mod search_attributes;
mod services;
mod streams;
mod system;
mod waiting;
mod webhooks;
mod worker_tasks;
mod workers;
mod workflows;

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};

use crate::server::auth::{plane_of, Plane};
use crate::server::wire::{
    CONTROL_PLANE_HEADER, CONTROL_PLANE_VERSION, NAMESPACE_HEADER, PROTOCOL_HEADER,
    WORKER_PROTOCOL_VERSIONS,
};

/// [`CONTROL_PLANE_HEADER`] as a header name: inserting a `&str` name
/// parses it again on every answer.
const CONTROL_PLANE_HEADER_NAME: HeaderName =
    HeaderName::from_static("x-durable-workflow-control-plane-version");
/// [`PROTOCOL_HEADER`] as a header name.
const PROTOCOL_HEADER_NAME: HeaderName =
    HeaderName::from_static("x-durable-workflow-protocol-version");
use crate::server::{ApiError, Engine};

type Shared = State<Arc<Engine>>;

/// The namespace and protocol version a request was admitted with.
#[derive(Debug, Clone)]
pub struct Scope {
    /// From `X-Namespace` (default `default`).
    pub namespace: String,
}

/// Every route of the server, behind the gate.
///
/// The gate and the body-limit setting wrap the router once, not each
/// route: `Router::layer` wraps every route in both, and each wrapping
/// cloned a boxed service and boxed a future on every request, about a
/// dozen allocations per request (docs/performance.md, "the gate's
/// copies").
pub fn router(engine: Arc<Engine>) -> App {
    let routes = Router::new()
        .merge(discovery::routes())
        .merge(system::routes())
        .merge(workflows::routes())
        .merge(streams::routes())
        .merge(search_attributes::routes())
        .merge(schedules::routes())
        .merge(services::routes())
        .merge(worker_tasks::routes())
        .merge(workers::routes())
        .merge(workers::queue_routes())
        .merge(workers::export_routes())
        .merge(external_payloads::routes())
        .merge(webhooks::routes())
        .merge(crate::server::ui::routes(&engine))
        .fallback(|| async {
            refuse_with(
                StatusCode::NOT_FOUND,
                json!({ "reason": "route_not_found", "message": "no such route; see docs/api.md" }),
            )
        })
        .with_state(engine.clone());
    App {
        engine,
        // The body limit is dwpolicy's, answered with its JSON, not axum's default.
        routes: DefaultBodyLimit::disable().layer(routes),
    }
}

/// The routes with the body-limit setting.
type Routes = <DefaultBodyLimit as Layer<Router>>::Service;

/// The server as one service: every request passes [`gate`], then the
/// routes.
#[derive(Clone)]
pub struct App {
    engine: Arc<Engine>,
    routes: Routes,
}

impl tower::Service<Request> for App {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response, Self::Error>> + Send + 'static>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        // The router is always ready; each request clones it.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let (engine, routes) = (self.engine.clone(), self.routes.clone());
        Box::pin(async move { Ok(gate(engine, request, routes).await) })
    }
}

/// The request on to its route.
async fn route(routes: Routes, request: Request) -> Response {
    match routes.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn refuse_with(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

/// Host, auth, content type, versions and namespace, in that order.
async fn gate(engine: Arc<Engine>, mut request: Request, routes: Routes) -> Response {
    // Borrowed from the request, not copied: the borrows end before the
    // request is handed on (docs/performance.md, "the gate's copies").
    let path = request.uri().path();
    let method = request.method().as_str();
    let headers = request.headers();
    // A refusal before the body is read ends the connection: hyper would
    // otherwise have to discard the unread body, and a client reusing the
    // connection meanwhile raced its close.
    let unread = has_body(headers);
    if let Err(refusal) = check_host(&engine, headers) {
        return closing(*refusal, unread);
    }
    // The console authenticates by its own cookie (server/ui/session.rs).
    if crate::server::ui::serves(&engine, path) {
        return route(routes, request).await;
    }
    let plane = plane_of(method, path);
    let mut caller = None;
    if let Some(tokens) = &engine.config.auth {
        // Webhook deliveries carry their own signature instead of a token.
        if !matches!(plane, Plane::Probe | Plane::Webhook) {
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(crate::server::auth::bearer_token);
            let Some(found) = presented.and_then(|t| tokens.caller_of(t)) else {
                return closing(
                    refuse_with(
                        StatusCode::UNAUTHORIZED,
                        json!({ "reason": "unauthorized", "message": "send Authorization: Bearer <token> with a configured token" }),
                    ),
                    unread,
                );
            };
            let role = found.role;
            if !plane.admits(role) {
                return closing(
                    refuse_with(
                        StatusCode::FORBIDDEN,
                        json!({ "reason": "forbidden", "role": role.as_str(),
                                "message": format!("a {} token cannot use {method} {path}", role.as_str()) }),
                    ),
                    unread,
                );
            }
            if plane == Plane::Payload && method == "POST" {
                if let Err(refusal) = check_upload_role(&engine, role) {
                    return closing(*refusal, unread);
                }
            }
            caller = Some(found);
        }
    }
    // Payload uploads are raw bytes (application/octet-stream).
    if unread && !is_json(headers) && plane != Plane::Payload {
        return closing(
            refuse_with(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                json!({ "reason": "unsupported_media_type",
                        "message": "request bodies must be sent with Content-Type: application/json" }),
            ),
            true,
        );
    }
    let echo = match version_of(plane, path, headers) {
        Ok(echo) => echo,
        Err(refusal) => return *refusal,
    };
    if is_control_plane(path) || path.starts_with("/api/worker/") || plane == Plane::Payload {
        let namespace = headers
            .get(NAMESPACE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .unwrap_or("default")
            .to_owned();
        // A registered namespace is a set lookup; only a first sight reads
        // the store, on the probe lane rather than the shared blocking pool.
        let checked = match engine.namespace_known(&namespace) {
            Ok(true) => Ok(()),
            Ok(false) => {
                let namespace = namespace.clone();
                on_probe_lane(engine.clone(), move |e| e.require_namespace(&namespace)).await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            return with_echo(refuse(e), echo);
        }
        // A token bound to namespaces acts only in them; a service call
        // crosses into another namespace's catalog by design and is made
        // as the token's namespace (checked by the call itself).
        if let Some(caller) = &caller {
            if !caller.admits_namespace(&namespace) && !is_service_call(path) {
                return with_echo(
                    closing(
                        refuse_with(
                            StatusCode::FORBIDDEN,
                            json!({ "reason": "namespace_forbidden", "namespace": namespace,
                                    "token_namespaces": caller.namespaces,
                                    "message": format!("this token is bound to other namespaces than {namespace:?}; send X-Namespace with one of its namespaces, or use a token bound to {namespace:?}") }),
                        ),
                        unread,
                    ),
                    echo,
                );
            }
        }
        request.extensions_mut().insert(Scope { namespace });
    }
    if let Some(caller) = caller {
        request.extensions_mut().insert(caller);
    }
    with_echo(route(routes, request).await, echo)
}

/// An upload by a role `DW_EXTERNAL_PAYLOAD_UPLOAD_ROLES` leaves out: 403
/// `external_payload_unauthorized` (the SDKs raise their
/// `ExternalPayloadUnauthorized` on it), before a byte of the body is read.
fn check_upload_role(
    engine: &Engine,
    role: crate::server::auth::Role,
) -> Result<(), Box<Response>> {
    let settings = &engine.config.external_payloads;
    if settings.may_upload(role) {
        return Ok(());
    }
    let allowed: Vec<&str> = settings.upload_roles.iter().map(|r| r.as_str()).collect();
    Err(Box::new(refuse_with(
        StatusCode::FORBIDDEN,
        json!({
            "reason": "external_payload_unauthorized", "role": role.as_str(),
            "allowed_roles": allowed, "retryable": false,
            "message": format!(
                "a {} token may not upload external payloads: {} allows {}",
                role.as_str(),
                crate::external_payloads::ExternalPayloadSettings::UPLOAD_ROLES_ENV,
                allowed.join(", ")
            ),
        }),
    )))
}

/// `response` with `Connection: close` when the request's body was left unread.
fn closing(mut response: Response, unread: bool) -> Response {
    if unread {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

fn check_host(engine: &Engine, headers: &HeaderMap) -> Result<(), Box<Response>> {
    let allowed = &engine.config.allowed_hosts;
    if allowed.is_empty() {
        return Ok(());
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(host) = refused_host(allowed, host) else {
        return Ok(());
    };
    Err(Box::new(refuse_with(
        StatusCode::BAD_REQUEST,
        json!({ "reason": "host_not_allowed", "host": &*host, "allowed_hosts": allowed,
                "message": "this Host is not served; set DW_ALLOWED_HOSTS to add it" }),
    )))
}

/// `host` lowercased when its name (without a port) is not in `allowed`.
/// Lowercased only when it has capitals, and compared borrowed: this runs
/// on every request, and its two owned strings were 2 % of a start's
/// runtime-thread instructions (docs/performance.md, "A start's round
/// trip").
fn refused_host<'a>(allowed: &[String], host: &'a str) -> Option<std::borrow::Cow<'a, str>> {
    let host = if host.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(host.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(host)
    };
    // Strip the port: `[::1]:80` keeps its brackets, `localhost:80` loses `:80`.
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !name.is_empty() => name,
        _ => &*host,
    };
    if allowed.iter().any(|a| a == name) {
        None
    } else {
        Some(host)
    }
}

fn has_body(headers: &HeaderMap) -> bool {
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    match length {
        Some(n) => n > 0,
        None => headers.contains_key(header::TRANSFER_ENCODING),
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| is_json_media(v.split(';').next().unwrap_or("").trim()))
        .unwrap_or(false)
}

/// `application/json` or `application/*+json`, in any case; compared
/// without a lowercased copy (the gate runs on every request).
fn is_json_media(media: &str) -> bool {
    let media = media.as_bytes();
    let (prefix, suffix) = (b"application/".as_slice(), b"+json".as_slice());
    media.eq_ignore_ascii_case(b"application/json")
        || (media.len() >= prefix.len()
            && media[..prefix.len()].eq_ignore_ascii_case(prefix)
            && media.len() >= suffix.len()
            && media[media.len() - suffix.len()..].eq_ignore_ascii_case(suffix))
}

/// The version header to echo, or the 400 naming the supported versions.
fn version_of(plane: Plane, path: &str, headers: &HeaderMap) -> Result<Echo, Box<Response>> {
    let sent = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    match plane {
        Plane::Worker => {
            let version = sent(PROTOCOL_HEADER)
                .unwrap_or(WORKER_PROTOCOL_VERSIONS[WORKER_PROTOCOL_VERSIONS.len() - 1]);
            let Some(version) = WORKER_PROTOCOL_VERSIONS.iter().find(|v| **v == version) else {
                return Err(Box::new(refuse_with(
                    StatusCode::BAD_REQUEST,
                    json!({ "reason": "unsupported_protocol_version", "requested_version": version,
                            "supported_versions": WORKER_PROTOCOL_VERSIONS,
                            "message": format!("X-Durable-Workflow-Protocol-Version {version:?} is not supported; this server speaks {}", WORKER_PROTOCOL_VERSIONS.join(" and ")) }),
                )));
            };
            Ok(Some((PROTOCOL_HEADER_NAME, version)))
        }
        Plane::Control if is_control_plane(path) => {
            let version = sent(CONTROL_PLANE_HEADER).unwrap_or(CONTROL_PLANE_VERSION);
            if version != CONTROL_PLANE_VERSION {
                return Err(Box::new(refuse_with(
                    StatusCode::BAD_REQUEST,
                    json!({ "reason": "unsupported_control_plane_version", "requested_version": version,
                            "supported_versions": [CONTROL_PLANE_VERSION],
                            "message": format!("X-Durable-Workflow-Control-Plane-Version {version:?} is not supported; this server speaks {CONTROL_PLANE_VERSION}") }),
                )));
            }
            Ok(Some((CONTROL_PLANE_HEADER_NAME, CONTROL_PLANE_VERSION)))
        }
        _ => Ok(None),
    }
}

/// A Nexus operation call or the look at one: the routes a bound token may
/// use in another namespace (the catalog's).
fn is_service_call(path: &str) -> bool {
    path.starts_with("/api/service-endpoints/")
        && path.contains("/operations/")
        && (path.ends_with("/execute") || path.contains("/service-calls/"))
}

/// Control-plane routes: versioned and namespace-scoped (`X-Namespace`).
fn is_control_plane(path: &str) -> bool {
    [
        "/api/workflows",
        "/api/search-attributes",
        "/api/schedules",
        "/api/service-endpoints",
        "/api/workers",
        "/api/task-queues",
    ]
    .iter()
    .any(|prefix| path.starts_with(prefix))
}

/// The version header echoed on the answer: a constant name and a
/// static value (the version was checked to be one this server speaks),
/// so the echo neither parses a header name nor copies the value.
type Echo = Option<(HeaderName, &'static str)>;

fn with_echo(mut response: Response, echo: Echo) -> Response {
    if let Some((name, version)) = echo {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(version));
    }
    response
}

fn reply(result: Result<Value, ApiError>) -> Response {
    reply_with(StatusCode::OK, result)
}

fn reply_with(status: StatusCode, result: Result<Value, ApiError>) -> Response {
    match result {
        Ok(value) => (status, Json(value)).into_response(),
        Err(e) => refuse(e),
    }
}

fn refuse(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, Json(e.body())).into_response();
    if let Some(seconds) = e.retry_after_seconds() {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// Reads at most the payload limit, then parses; empty bodies read as `{}`.
async fn read<T: DeserializeOwned>(
    engine: &Engine,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    let bytes = read_bytes(engine, headers, body).await?;
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        &bytes
    };
    serde_json::from_slice(bytes).map_err(|e| ApiError::Malformed(e.to_string()))
}

/// The body's bytes, at most the payload limit (`413` past it).
async fn read_bytes(
    engine: &Engine,
    headers: &HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, ApiError> {
    let limits = &engine.config.request_limits;
    let declared = headers
        .get(header::CONTENT_LENGTH)
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
        Err(e) if crate::server::body_deadline::is_body_timeout(&e) => {
            return Err(ApiError::BodyTimedOut(e.to_string()));
        }
        Err(e) if is_length_limit(&e) => {
            limits.check_body(limits.max_payload_bytes.saturating_add(1))?;
            return Err(ApiError::Malformed("unreadable body".into()));
        }
        // A malformed chunk, a connection cut mid-body: the request is
        // malformed (400), not too large.
        Err(e) => return Err(ApiError::Malformed(format!("unreadable body: {e}"))),
    };
    limits.check_body(bytes.len() as u64)?;
    Ok(bytes)
}

/// Runs `f` on the probe lane: a few threads of their own for health,
/// readiness and the gate's first look at a namespace, so a busy shared
/// blocking pool never delays them.
pub(super) async fn on_probe_lane<R: Send + 'static>(
    engine: Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<R, ApiError> + Send + 'static,
) -> Result<R, ApiError> {
    static LANE: std::sync::OnceLock<Option<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    on_lane(&LANE, "dwserver-probe", PROBE_THREADS, engine, f).await
}

/// Runs `f` on the wait lane: the blocking steps of waiting calls (begin,
/// look, finish) on at most [`WAIT_THREADS`] threads of their own. The
/// kinds' turns ([`crate::waiters::BEGINNING_AT_ONCE`]) keep each kind to
/// its share; the lane's fixed size is what bounds the threads: on the
/// shared pool a finished step's thread, not yet back among the idle ones
/// on a loaded machine, made the next step spawn another (48 -> 107
/// threads under 600 waits).
pub(super) async fn on_wait_lane<R: Send + 'static>(
    engine: Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<R, ApiError> + Send + 'static,
) -> Result<R, ApiError> {
    static LANE: std::sync::OnceLock<Option<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    on_lane(&LANE, "dwserver-wait", WAIT_THREADS, engine, f).await
}

/// Runs `f` on the poll lane: the steps of worker long polls (claims,
/// passes, answers) on at most [`POLL_THREADS`] threads of their own.
/// Their waits between steps hold no thread
/// (`worker_tasks::wait_for_work`); the lane's fixed size bounds the
/// threads the steps take however many polls wait, where a poll used to
/// sleep on a thread of the shared pool (600 polls: 600 threads).
pub(super) async fn on_poll_lane<R: Send + 'static>(
    engine: Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<R, ApiError> + Send + 'static,
) -> Result<R, ApiError> {
    static LANE: std::sync::OnceLock<Option<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    on_lane(&LANE, "dwserver-poll", POLL_THREADS, engine, f).await
}

/// Runs `f` on the stream lane: the re-reads of waiting stream page reads
/// on at most [`STREAM_THREADS`] threads of their own. On the shared pool
/// 600 waiting reads, each re-reading every 100 ms, grew the process to
/// 153 threads; here they queue for the lane instead (a re-read then comes
/// a little later, never on a thread more).
pub(super) async fn on_stream_lane<R: Send + 'static>(
    engine: Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<R, ApiError> + Send + 'static,
) -> Result<R, ApiError> {
    static LANE: std::sync::OnceLock<Option<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    on_lane(&LANE, "dwserver-stream", STREAM_THREADS, engine, f).await
}

/// Runs `f` on the blocking threads of `lane` (a runtime of its own, made
/// on first use, whose pool never grows past `threads`), or on the shared
/// pool if that runtime cannot be made.
async fn on_lane<R: Send + 'static>(
    lane: &'static std::sync::OnceLock<Option<tokio::runtime::Runtime>>,
    name: &'static str,
    threads: usize,
    engine: Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<R, ApiError> + Send + 'static,
) -> Result<R, ApiError> {
    let lane = lane.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .thread_name(name)
            .max_blocking_threads(threads)
            .build()
            .ok()
    });
    let task = match lane {
        Some(lane) => lane.spawn_blocking(move || f(&engine)),
        None => tokio::task::spawn_blocking(move || f(&engine)),
    };
    task.await
        .unwrap_or_else(|e| Err(ApiError::Internal(e.to_string())))
}

/// Threads of the probe lane.
const PROBE_THREADS: usize = 4;

/// Threads of the poll lane: as many as the polls that used to begin at
/// once on the shared pool.
const POLL_THREADS: usize = 16;

/// Threads of the stream lane.
const STREAM_THREADS: usize = 4;

/// Threads of the wait lane: each kind's turns at once.
const WAIT_THREADS: usize = crate::waiters::BEGINNING_AT_ONCE * crate::waiters::WaitKind::ALL.len();

/// Whether reading a body failed because it passed the read limit.
fn is_length_limit(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

async fn run_blocking<R: Send + 'static>(
    engine: Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<R, ApiError> + Send + 'static,
) -> Result<R, ApiError> {
    tokio::task::spawn_blocking(move || f(&engine))
        .await
        .unwrap_or_else(|e| Err(ApiError::Internal(e.to_string())))
}

async fn blocking(
    engine: Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<Value, ApiError> + Send + 'static,
) -> Response {
    reply(run_blocking(engine, f).await)
}

/// Parses the body as `T`, then runs `f` on the blocking pool: 200.
async fn with_body<T: DeserializeOwned + Send + 'static>(
    engine: Arc<Engine>,
    headers: HeaderMap,
    body: Body,
    f: impl FnOnce(&Engine, T) -> Result<Value, ApiError> + Send + 'static,
) -> Response {
    with_body_status(StatusCode::OK, engine, headers, body, f).await
}

/// As [`with_body`], answering with `status` on success.
async fn with_body_status<T: DeserializeOwned + Send + 'static>(
    status: StatusCode,
    engine: Arc<Engine>,
    headers: HeaderMap,
    body: Body,
    f: impl FnOnce(&Engine, T) -> Result<Value, ApiError> + Send + 'static,
) -> Response {
    match read::<T>(&engine, &headers, body).await {
        Ok(parsed) => reply_with(status, run_blocking(engine, move |e| f(e, parsed)).await),
        Err(e) => refuse(e),
    }
}

/// A response taken apart for a test comparing two replies byte for byte:
/// its status, headers and whole body.
#[cfg(test)]
pub(crate) async fn response_parts(
    response: axum::response::Response,
) -> (axum::http::StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    (parts.status, parts.headers, body.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_matched_lowercased_and_without_its_port() {
        let allowed = vec!["localhost".to_owned(), "[::1]".to_owned()];
        for host in [
            "localhost",
            "localhost:8080",
            "LocalHost:80",
            "[::1]:80",
            "[::1]",
        ] {
            assert_eq!(refused_host(&allowed, host), None, "{host}");
        }
        // Refused hosts are named lowercased, with their port, as before.
        for (host, named) in [
            ("evil.example", "evil.example"),
            ("EVIL.example:8080", "evil.example:8080"),
            ("localhost:http", "localhost:http"),
            (":80", ":80"),
            ("", ""),
            ("localhost.", "localhost."),
        ] {
            assert_eq!(
                refused_host(&allowed, host).as_deref(),
                Some(named),
                "{host}"
            );
        }
    }

    /// The media check without a lowercased copy admits what the copy did.
    #[test]
    fn json_media_types_are_matched_in_any_case() {
        let lowercased = |media: &str| {
            let media = media.to_ascii_lowercase();
            media == "application/json"
                || (media.starts_with("application/") && media.ends_with("+json"))
        };
        for media in [
            "application/json",
            "Application/JSON",
            "application/vnd.api+json",
            "APPLICATION/PROBLEM+JSON",
            "application/+json",
            "application/json+",
            "application/jso",
            "application/",
            "application+json",
            "text/json",
            "json",
            "",
            "application/\u{e9}+json",
            "\u{c9}pplication/json",
        ] {
            assert_eq!(is_json_media(media), lowercased(media), "{media:?}");
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(" Application/Json ; charset=utf-8"),
        );
        assert!(is_json(&headers));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(!is_json(&headers));
    }

    /// The echoed version is the one sent (trimmed), or the default, under
    /// the header's own name, as when it was copied from the request.
    #[test]
    fn versions_are_echoed_as_sent() {
        assert_eq!(CONTROL_PLANE_HEADER_NAME.as_str(), CONTROL_PLANE_HEADER);
        assert_eq!(PROTOCOL_HEADER_NAME.as_str(), PROTOCOL_HEADER);
        let echo = |plane, path, sent: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in sent {
                headers.insert(*name, HeaderValue::from_static(value));
            }
            match version_of(plane, path, &headers) {
                Ok(echo) => Ok(echo.map(|(name, value)| (name.as_str().to_owned(), value))),
                Err(refusal) => Err(refusal.status()),
            }
        };
        let worker = |v: &'static str| Ok(Some((PROTOCOL_HEADER.to_owned(), v)));
        let control = Ok(Some((CONTROL_PLANE_HEADER.to_owned(), "2")));
        let path = "/api/worker/workflow-tasks/poll";
        assert_eq!(echo(Plane::Worker, path, &[]), worker("1.20"));
        assert_eq!(
            echo(Plane::Worker, path, &[(PROTOCOL_HEADER, " 1.19 ")]),
            worker("1.19")
        );
        assert_eq!(
            echo(Plane::Worker, path, &[(PROTOCOL_HEADER, "1.20")]),
            worker("1.20")
        );
        assert_eq!(
            echo(Plane::Worker, path, &[(PROTOCOL_HEADER, "1.2")]),
            Err(StatusCode::BAD_REQUEST)
        );
        assert_eq!(echo(Plane::Control, "/api/workflows", &[]), control);
        assert_eq!(
            echo(
                Plane::Control,
                "/api/workflows",
                &[(CONTROL_PLANE_HEADER, "2 ")]
            ),
            control
        );
        assert_eq!(
            echo(
                Plane::Control,
                "/api/workflows",
                &[(CONTROL_PLANE_HEADER, "3")]
            ),
            Err(StatusCode::BAD_REQUEST)
        );
        assert_eq!(echo(Plane::Control, "/api/namespaces", &[]), Ok(None));
        assert_eq!(echo(Plane::Probe, "/api/health", &[]), Ok(None));
    }
}
