//! The console's HTTP handlers: admit the visitor, read the query or form,
//! run the page's [`data`] read (or the engine's action) on the blocking
//! pool, render. Decisions live in the engine and the views.

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Extension;
use maud::Markup;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::server::ui::data::{self, RunsQuery};
use crate::server::ui::layout::{self, link, run_link};
use crate::server::ui::operations_view::Family;
use crate::server::ui::run_view::Action;
use crate::server::ui::session::{self, Refusal, Viewer};
use crate::server::ui::state::UiState;
use crate::server::ui::{exceptions_view, operations_view, run_view, runs_view};
use crate::server::wire::{self, SignalBody, StopBody};
use crate::server::{ApiError, Engine};

type Shared = State<Arc<Engine>>;
type Ui = Extension<Arc<UiState>>;

/// The largest form the console accepts (a signal's arguments included).
const MAX_FORM_BYTES: usize = 64 * 1024;

async fn blocking<R: Send + 'static>(
    engine: Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<R, ApiError> + Send + 'static,
) -> Result<R, ApiError> {
    tokio::task::spawn_blocking(move || f(&engine))
        .await
        .unwrap_or_else(|e| Err(ApiError::Internal(e.to_string())))
}

fn html(status: StatusCode, markup: Markup) -> Response {
    (status, Html(markup.into_string())).into_response()
}

/// The visitor, or the response that turns them away: a redirect to the
/// sign-in page (back here afterwards), or a 403 naming their role.
fn admit(
    engine: &Engine,
    ui: &UiState,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Viewer, Box<Response>> {
    match session::viewer(engine.config.auth.as_ref(), &ui.key, headers) {
        Ok(viewer) => Ok(viewer),
        Err(Refusal::SignIn) => {
            let next = uri.path_and_query().map_or("/ui/runs", |p| p.as_str());
            Err(Box::new(
                Redirect::to(&link("/ui/sign-in", &[("next", next)])).into_response(),
            ))
        }
        Err(Refusal::Bound) => Err(Box::new(html(
            StatusCode::FORBIDDEN,
            layout::problem(None, "default", 403, session::BOUND_TOKEN_REFUSAL),
        ))),
        Err(Refusal::Role(role)) => Err(Box::new(html(
            StatusCode::FORBIDDEN,
            layout::problem(
                None,
                "default",
                403,
                &format!(
                    "A {} token cannot use the console; sign in with an operator or admin token.",
                    role.as_str()
                ),
            ),
        ))),
    }
}

fn refused(viewer: &Viewer, ns: &str, e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = e.body();
    let message = body["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| body.to_string());
    html(
        status,
        layout::problem(Some(viewer), ns, status.as_u16(), &message),
    )
}

fn malformed(viewer: &Viewer, ns: &str, message: String) -> Response {
    refused(viewer, ns, &ApiError::Malformed(message))
}

/// [`admit`], then the page's query string: one the page cannot read is
/// the console's 400 page, the same for every page.
fn admit_query<T>(
    engine: &Engine,
    ui: &UiState,
    headers: &HeaderMap,
    uri: &Uri,
    query: Result<Query<T>, QueryRejection>,
) -> Result<(Viewer, T), Box<Response>> {
    let viewer = admit(engine, ui, headers, uri)?;
    match query {
        Ok(Query(q)) => Ok((viewer, q)),
        Err(_) => Err(Box::new(malformed(
            &viewer,
            "default",
            "unreadable query string".into(),
        ))),
    }
}

/// `GET /ui`: the runs list.
pub async fn home() -> Redirect {
    Redirect::to("/ui/runs")
}

/// `GET /ui/assets/ui.css`.
pub async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        layout::STYLESHEET,
    )
        .into_response()
}

#[derive(Debug, Default, Deserialize)]
pub struct NextQuery {
    #[serde(default)]
    next: Option<String>,
}

/// `GET /ui/sign-in`.
pub async fn sign_in_page(State(engine): Shared, Query(q): Query<NextQuery>) -> Response {
    let next = session::local_target(q.next.as_deref());
    if engine.config.auth.is_none() {
        return Redirect::to(&next).into_response();
    }
    html(StatusCode::OK, layout::sign_in(&next, None))
}

#[derive(Debug, Default, Deserialize)]
struct SignInForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: Option<String>,
}

async fn form<T: serde::de::DeserializeOwned>(body: Body) -> Result<T, String> {
    let bytes = to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| format!("the form is larger than {MAX_FORM_BYTES} bytes"))?;
    serde_urlencoded::from_bytes(&bytes).map_err(|e| format!("unreadable form: {e}"))
}

/// `POST /ui/sign-in`: a known operator or admin token sets the cookie.
pub async fn sign_in(State(engine): Shared, headers: HeaderMap, body: Body) -> Response {
    let parsed: SignInForm = match form(body).await {
        Ok(f) => f,
        Err(e) => {
            return html(
                StatusCode::BAD_REQUEST,
                layout::sign_in("/ui/runs", Some(&e)),
            )
        }
    };
    let next = session::local_target(parsed.next.as_deref());
    let Some(tokens) = &engine.config.auth else {
        return Redirect::to(&next).into_response();
    };
    if !session::same_origin(&headers) {
        return html(
            StatusCode::FORBIDDEN,
            layout::sign_in(&next, Some("The form came from another site.")),
        );
    }
    let caller = tokens.caller_of(parsed.token.trim());
    if caller.as_ref().is_some_and(|c| c.namespaces.is_some()) {
        return html(
            StatusCode::FORBIDDEN,
            layout::sign_in(&next, Some(session::BOUND_TOKEN_REFUSAL)),
        );
    }
    match caller.map(|c| c.role) {
        Some(role) if role != crate::server::auth::Role::Worker => {
            let mut response = Redirect::to(&next).into_response();
            response.headers_mut().insert(
                header::SET_COOKIE,
                session::sign_in_cookie(parsed.token.trim()),
            );
            response
        }
        Some(role) => html(
            StatusCode::FORBIDDEN,
            layout::sign_in(
                &next,
                Some(&format!(
                    "A {} token cannot use the console.",
                    role.as_str()
                )),
            ),
        ),
        None => html(
            StatusCode::UNAUTHORIZED,
            layout::sign_in(&next, Some("That token is not configured on this server.")),
        ),
    }
}

#[derive(Debug, Default, Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /ui/sign-out`.
pub async fn sign_out(
    State(engine): Shared,
    Extension(ui): Ui,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> Response {
    let viewer = match admit(&engine, &ui, &headers, &uri) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let parsed: CsrfForm = form(body).await.unwrap_or_default();
    if !session::csrf_matches(&viewer, &parsed.csrf) || !session::same_origin(&headers) {
        return html(
            StatusCode::FORBIDDEN,
            layout::problem(
                Some(&viewer),
                "default",
                403,
                "The form's CSRF token is missing or stale; reload the page.",
            ),
        );
    }
    let mut response = Redirect::to("/ui/sign-in").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session::sign_out_cookie());
    response
}

/// `GET /ui/runs`.
pub async fn runs(
    State(engine): Shared,
    Extension(ui): Ui,
    headers: HeaderMap,
    uri: Uri,
    query: Result<Query<RunsQuery>, QueryRejection>,
) -> Response {
    let (viewer, query) = match admit_query(&engine, &ui, &headers, &uri, query) {
        Ok(admitted) => admitted,
        Err(r) => return *r,
    };
    let q = query.clone();
    match blocking(engine, move |e| data::runs_page(e, &q)).await {
        Ok(page) => html(StatusCode::OK, runs_view::render(&viewer, &query, &page)),
        Err(e) => refused(&viewer, query.namespace(), &e),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct RunQuery {
    #[serde(default)]
    ns: Option<String>,
    #[serde(default)]
    wf: String,
    #[serde(default)]
    run: Option<String>,
    #[serde(default)]
    events: Option<String>,
    #[serde(default)]
    done: Option<String>,
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    field: Option<String>,
}

impl RunQuery {
    fn ns(&self) -> String {
        namespace_or_default(self.ns.as_deref())
    }
}

/// The namespace a page or form names, `default` when it names none.
fn namespace_or_default(ns: Option<&str>) -> String {
    ns.filter(|n| !n.trim().is_empty())
        .unwrap_or("default")
        .to_owned()
}

/// What a finished action says on the run's page (never user text).
fn flash(done: Option<&str>) -> Option<&'static str> {
    match done? {
        "cancel" => Some("Cancelled."),
        "terminate" => Some("Terminated."),
        "signal" => Some("Signal sent."),
        _ => None,
    }
}

/// `GET /ui/run`.
pub async fn run(
    State(engine): Shared,
    Extension(ui): Ui,
    headers: HeaderMap,
    uri: Uri,
    query: Result<Query<RunQuery>, QueryRejection>,
) -> Response {
    let (viewer, q) = match admit_query(&engine, &ui, &headers, &uri, query) {
        Ok(admitted) => admitted,
        Err(r) => return *r,
    };
    let ns = q.ns();
    let (n, wf, run, events) = (ns.clone(), q.wf.clone(), q.run.clone(), q.events.clone());
    let read = blocking(engine, move |e| {
        data::run_view(
            e,
            &n,
            &wf,
            run.as_deref().filter(|r| !r.is_empty()),
            events.as_deref().filter(|t| !t.is_empty()),
        )
    })
    .await;
    match read {
        Ok(view) => html(
            StatusCode::OK,
            run_view::render(&viewer, &ns, &view, flash(q.done.as_deref())),
        ),
        Err(e) => refused(&viewer, &ns, &e),
    }
}

/// `GET /ui/run/payload`: one payload whole, as JSON text.
pub async fn run_payload(
    State(engine): Shared,
    Extension(ui): Ui,
    headers: HeaderMap,
    uri: Uri,
    query: Result<Query<RunQuery>, QueryRejection>,
) -> Response {
    let (viewer, q) = match admit_query(&engine, &ui, &headers, &uri, query) {
        Ok(admitted) => admitted,
        Err(r) => return *r,
    };
    let ns = q.ns();
    let (n, wf, run, field) = (
        ns.clone(),
        q.wf.clone(),
        q.run.clone().unwrap_or_default(),
        q.field.clone().unwrap_or_default(),
    );
    match blocking(engine, move |e| data::run_payload(e, &n, &wf, &run, &field)).await {
        Ok(value) => (
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            serde_json::to_string_pretty(&value).unwrap_or_default(),
        )
            .into_response(),
        Err(e) => refused(&viewer, &ns, &e),
    }
}

/// `GET /ui/run/confirm`: the confirmation step of an action.
pub async fn confirm(
    State(engine): Shared,
    Extension(ui): Ui,
    headers: HeaderMap,
    uri: Uri,
    query: Result<Query<RunQuery>, QueryRejection>,
) -> Response {
    let (viewer, q) = match admit_query(&engine, &ui, &headers, &uri, query) {
        Ok(admitted) => admitted,
        Err(r) => return *r,
    };
    let ns = q.ns();
    if !viewer.may_act() {
        return html(
            StatusCode::FORBIDDEN,
            layout::problem(
                Some(&viewer),
                &ns,
                403,
                "Actions need an operator or admin token.",
            ),
        );
    }
    let Some(action) = q.action.as_deref().and_then(Action::parse) else {
        return malformed(
            &viewer,
            &ns,
            "action: use signal, cancel or terminate".into(),
        );
    };
    html(
        StatusCode::OK,
        run_view::confirm(&viewer, &ns, &q.wf, q.run.as_deref().unwrap_or(""), action),
    )
}

#[derive(Debug, Default, Deserialize)]
struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    ns: Option<String>,
    #[serde(default)]
    wf: String,
    #[serde(default)]
    run: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<String>,
}

/// `POST /ui/run/action`: a confirmed signal, cancel or terminate.
pub async fn act(
    State(engine): Shared,
    Extension(ui): Ui,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> Response {
    let viewer = match admit(&engine, &ui, &headers, &uri) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let parsed: ActionForm = match form(body).await {
        Ok(f) => f,
        Err(e) => return malformed(&viewer, "default", e),
    };
    let ns = namespace_or_default(parsed.ns.as_deref());
    if !session::csrf_matches(&viewer, &parsed.csrf) || !session::same_origin(&headers) {
        return html(
            StatusCode::FORBIDDEN,
            layout::problem(
                Some(&viewer),
                &ns,
                403,
                "The form's CSRF token is missing or stale; reload the page and confirm again.",
            ),
        );
    }
    if !viewer.may_act() {
        return html(
            StatusCode::FORBIDDEN,
            layout::problem(
                Some(&viewer),
                &ns,
                403,
                "Actions need an operator or admin token.",
            ),
        );
    }
    let Some(action) = Action::parse(&parsed.action) else {
        return malformed(
            &viewer,
            &ns,
            "action: use signal, cancel or terminate".into(),
        );
    };
    let (n, wf, run) = (ns.clone(), parsed.wf.clone(), parsed.run.clone());
    let done = blocking(engine, move |e| {
        let run = Some(run.as_str()).filter(|r| !r.is_empty());
        match action {
            Action::Cancel | Action::Terminate => {
                let stop = StopBody {
                    reason: parsed.reason.filter(|r| !r.trim().is_empty()),
                    request_id: None,
                };
                e.stop(&n, &wf, run, action == Action::Terminate, stop)
            }
            Action::Signal => {
                let name = parsed.name.unwrap_or_default();
                let blob = parsed
                    .input
                    .filter(|i| !i.trim().is_empty())
                    .unwrap_or_else(|| "[]".into());
                if serde_json::from_str::<Value>(&blob).is_err() {
                    return Err(ApiError::Malformed(
                        "the signal's arguments must be JSON (an array)".into(),
                    ));
                }
                let body = SignalBody {
                    input: json!({ "codec": "json", "blob": blob }),
                    request_id: None,
                };
                e.signal(&n, &wf, run, &name, body)
            }
        }
    })
    .await;
    match done {
        Ok(answer) => {
            let run = answer["run_id"].as_str().unwrap_or(&parsed.run).to_owned();
            let target = format!(
                "{}&done={}",
                run_link(&ns, &parsed.wf, &run),
                action.as_str()
            );
            Redirect::to(&target).into_response()
        }
        Err(e) => refused(&viewer, &ns, &e),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ExceptionsQuery {
    #[serde(default)]
    ns: Option<String>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    failures: Option<String>,
    #[serde(default)]
    tasks: Option<String>,
}

/// `GET /ui/exceptions`.
pub async fn exceptions(
    State(engine): Shared,
    Extension(ui): Ui,
    headers: HeaderMap,
    uri: Uri,
    query: Result<Query<ExceptionsQuery>, QueryRejection>,
) -> Response {
    let (viewer, q) = match admit_query(&engine, &ui, &headers, &uri, query) {
        Ok(admitted) => admitted,
        Err(r) => return *r,
    };
    let ns = namespace_or_default(q.ns.as_deref());
    let category = q.category.clone().filter(|c| !c.trim().is_empty());
    let position = |token: &Option<String>| -> Result<Option<i64>, ApiError> {
        match token.as_deref().filter(|t| !t.is_empty()) {
            None => Ok(None),
            Some(t) => wire::parse_page_token(t)
                .and_then(|n| i64::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| ApiError::InvalidPageToken(t.to_owned())),
        }
    };
    let (failures, tasks) = match (position(&q.failures), position(&q.tasks)) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(e), _) | (_, Err(e)) => return refused(&viewer, &ns, &e),
    };
    // A page of one table continues only that table.
    let paging_one = failures.is_some() || tasks.is_some();
    let (n, c) = (ns.clone(), category.clone());
    let scan = engine.config.ui.filter_scan_limit;
    let read = blocking(engine, move |e| {
        let mut found = data::exceptions(e, &n, c.as_deref(), failures, tasks)?;
        if paging_one && failures.is_none() {
            found.failures.rows.clear();
            found.failures.continue_below = None;
        }
        if paging_one && tasks.is_none() {
            found.tasks.rows.clear();
            found.tasks.continue_below = None;
        }
        Ok(found)
    })
    .await;
    match read {
        Ok(found) => html(
            StatusCode::OK,
            exceptions_view::render(
                &viewer,
                &ns,
                category.as_deref().unwrap_or(""),
                &found,
                scan,
            ),
        ),
        Err(e) => refused(&viewer, &ns, &e),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct OperationsQuery {
    #[serde(default)]
    ns: Option<String>,
    #[serde(default)]
    workers: Option<String>,
    #[serde(default)]
    queues: Option<String>,
    #[serde(default)]
    schedules: Option<String>,
}

/// `GET /ui/operations` (admin, like `/api/system`).
pub async fn operations(
    State(engine): Shared,
    Extension(ui): Ui,
    headers: HeaderMap,
    uri: Uri,
    query: Result<Query<OperationsQuery>, QueryRejection>,
) -> Response {
    let (viewer, q) = match admit_query(&engine, &ui, &headers, &uri, query) {
        Ok(admitted) => admitted,
        Err(r) => return *r,
    };
    let ns = namespace_or_default(q.ns.as_deref());
    if !viewer.may_operate() {
        return html(
            StatusCode::FORBIDDEN,
            layout::problem(
                Some(&viewer),
                &ns,
                403,
                "The operations page, like /api/system, needs an admin token.",
            ),
        );
    }
    let n = ns.clone();
    let read = blocking(engine, move |e| {
        data::operations(
            e,
            &n,
            q.workers.as_deref().unwrap_or(""),
            q.queues.as_deref().unwrap_or(""),
            q.schedules.as_deref().filter(|s| !s.is_empty()),
        )
    })
    .await;
    let ops = match read {
        Ok(ops) => ops,
        Err(e) => return refused(&viewer, &ns, &e),
    };
    ui.samples.watch(&ns);
    let families: Vec<Family<'_>> = match crate::policy::embedded() {
        Ok(policy) => policy
            .cache_keys
            .iter()
            .map(|entry| Family {
                id: &entry.id.value,
                prefix: entry.prefix.as_ref().map_or("", |p| p.value.as_str()),
                bound: entry.bound.as_ref().map_or("", |b| b.value.as_str()),
                ttl: entry.ttl.as_ref().map_or("", |t| t.value.as_str()),
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    html(
        StatusCode::OK,
        operations_view::render(&viewer, &ns, &ops, &families, &ui.samples.snapshot()),
    )
}

/// Headers on every console answer: no framing, no sniffing, no script or
/// outside source at all, nothing cached.
pub async fn harden(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
