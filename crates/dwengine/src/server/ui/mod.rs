//! The operator console served at `/ui`: runs, a run's timeline and
//! limits, the exceptions table, and the operations page with charts.
//!
//! Pages are rendered on the server from maud templates (escaping every
//! interpolated value) with one embedded stylesheet and inline SVG for the
//! timeline, meters and charts: no script, no CDN, nothing fetched at run
//! time. Every page reads through the engine's own operations with the
//! API's bounded paging ([`data`]); the console's auth is the server's
//! tokens, kept in an `HttpOnly`, `SameSite=Strict` cookie ([`session`]).
//! [`routes`] is merged into the server's router; the request gate lets
//! `/ui` through ([`serves`]) because the console authenticates by cookie,
//! not by the API's bearer header. `docs/ui.md` shows the pages.

mod chart;
mod data;
mod exceptions_view;
mod handlers;
mod layout;
mod operations_view;
mod run_view;
mod runs_view;
mod samples;
pub mod session;
mod settings;
mod state;
mod timeline;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::{middleware, Extension, Router};

pub use settings::{
    UiSettings, CHART_SAMPLES, CHART_SERIES_SCAN_LIMIT_KEY, DEFAULT_CHART_SERIES_SCAN_LIMIT,
    DEFAULT_FILTER_SCAN_LIMIT, ENABLED_KEY, FILTER_SCAN_LIMIT_KEY, SAMPLE_EVERY,
};

use crate::server::Engine;

/// Whether `path` is the console's and the console is on: the request gate
/// then leaves auth to the console.
pub fn serves(engine: &Engine, path: &str) -> bool {
    engine.config.ui.enabled && (path == "/ui" || path.starts_with("/ui/"))
}

/// The console's routes (none when it is off), and its chart sampler.
pub fn routes(engine: &Arc<Engine>) -> Router<Arc<Engine>> {
    let settings = &engine.config.ui;
    if !settings.enabled {
        return Router::new();
    }
    let samples = Arc::new(samples::Samples::new(
        settings.chart_series_scan_limit,
        "default",
    ));
    samples::start(engine, samples.clone(), settings.sample_every);
    let state = Arc::new(state::UiState {
        key: session::CsrfKey::generate(),
        samples,
    });
    Router::new()
        .route("/ui", get(handlers::home))
        .route("/ui/", get(handlers::home))
        .route("/ui/assets/ui.css", get(handlers::stylesheet))
        .route(
            "/ui/sign-in",
            get(handlers::sign_in_page).post(handlers::sign_in),
        )
        .route("/ui/sign-out", post(handlers::sign_out))
        .route("/ui/runs", get(handlers::runs))
        .route("/ui/run", get(handlers::run))
        .route("/ui/run/payload", get(handlers::run_payload))
        .route("/ui/run/confirm", get(handlers::confirm))
        .route("/ui/run/action", post(handlers::act))
        .route("/ui/exceptions", get(handlers::exceptions))
        .route("/ui/operations", get(handlers::operations))
        .layer(middleware::map_response(handlers::harden))
        .layer(Extension(state))
}
