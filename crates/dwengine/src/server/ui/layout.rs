//! The console's page chrome and the small pieces every page uses: links
//! built from escaped query strings, times, truncated payloads, the
//! namespace switcher and the sign-in form.
//!
//! Pages are maud templates: every interpolated string is HTML-escaped by
//! the template engine, so a workflow id or payload holding markup is shown
//! as text. Nothing here emits `PreEscaped` user data.

use maud::{html, Markup, DOCTYPE};
use serde_json::Value;

use crate::server::ui::session::Viewer;

/// The stylesheet, embedded in the binary.
pub const STYLESHEET: &str = include_str!("assets/ui.css");

/// Characters of a payload shown before it is cut (with a link to all of it).
pub const PAYLOAD_PREVIEW_CHARS: usize = 400;

/// Which tab a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    /// Runs and a run.
    Runs,
    /// The exceptions table.
    Exceptions,
    /// Workers, queues, schedules, caches, charts.
    Operations,
}

/// `path?k=v&…` with the pairs form-encoded (empty values left out).
pub fn link(path: &str, pairs: &[(&str, &str)]) -> String {
    let kept: Vec<(&str, &str)> = pairs
        .iter()
        .copied()
        .filter(|(_, v)| !v.is_empty())
        .collect();
    if kept.is_empty() {
        return path.to_owned();
    }
    let query = serde_urlencoded::to_string(&kept).unwrap_or_default();
    format!("{path}?{query}")
}

/// The link to a run's page.
pub fn run_link(ns: &str, workflow_id: &str, run_id: &str) -> String {
    link(
        "/ui/run",
        &[("ns", ns), ("wf", workflow_id), ("run", run_id)],
    )
}

/// Unix ms as `2026-12-04 10:00:00 UTC`.
pub fn time(ms: i64) -> String {
    let stamp = crate::server::wire::timestamp(ms);
    format!("{} {} UTC", &stamp[..10], &stamp[11..19])
}

/// A duration in ms as `850 ms`, `12.3 s`, `4 min 5 s`.
pub fn duration(ms: i64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
    }
}

/// A JSON value as text, cut at [`PAYLOAD_PREVIEW_CHARS`] with a link to
/// `whole` when it is longer.
pub fn payload(value: &Value, whole: &str) -> Markup {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let total = text.chars().count();
    if total <= PAYLOAD_PREVIEW_CHARS {
        return html! { code.payload { (text) } };
    }
    let preview: String = text.chars().take(PAYLOAD_PREVIEW_CHARS).collect();
    html! {
        code.payload { (preview) "…" }
        " " a.whole href=(whole) { "show all " (text.len()) " bytes" }
    }
}

/// The whole page around `body`.
pub fn page(
    title: &str,
    viewer: Option<&Viewer>,
    ns: &str,
    tab: Option<Tab>,
    body: Markup,
) -> Markup {
    let tab_link = |t: Tab, path: &str, name: &str| {
        html! {
            a class=@if tab == Some(t) { "tab active" } @else { "tab" } href=(link(path, &[("ns", ns)])) { (name) }
        }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · dwserver" }
                link rel="stylesheet" href="/ui/assets/ui.css";
            }
            body {
                header.top {
                    a.brand href="/ui/runs" { "dwserver" }
                    @if let Some(viewer) = viewer {
                        nav {
                            (tab_link(Tab::Runs, "/ui/runs", "Runs"))
                            (tab_link(Tab::Exceptions, "/ui/exceptions", "Exceptions"))
                            @if viewer.may_operate() {
                                (tab_link(Tab::Operations, "/ui/operations", "Operations"))
                            }
                        }
                        form.ns method="get" action=(match tab {
                            Some(Tab::Exceptions) => "/ui/exceptions",
                            Some(Tab::Operations) => "/ui/operations",
                            _ => "/ui/runs",
                        }) {
                            label { "namespace " input name="ns" value=(ns) size="12"; }
                        }
                        span.role { "role: " (viewer.role_name()) }
                        @if viewer.role.is_some() {
                            form.signout method="post" action="/ui/sign-out" {
                                input type="hidden" name="csrf" value=(viewer.csrf);
                                button type="submit" { "sign out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The sign-in page; `problem` says why the last attempt failed.
pub fn sign_in(next: &str, problem: Option<&str>) -> Markup {
    page(
        "Sign in",
        None,
        "default",
        None,
        html! {
            h1 { "Sign in" }
            p { "This server requires a token. Use an operator or admin token (the values of "
                code { "DW_AUTH_OPERATOR_TOKENS" } " or " code { "DW_AUTH_ADMIN_TOKENS" } ")." }
            @if let Some(problem) = problem { p.error { (problem) } }
            form.signin method="post" action="/ui/sign-in" {
                input type="hidden" name="next" value=(next);
                label { "Token " input type="password" name="token" autocomplete="current-password" required; }
                button type="submit" { "Sign in" }
            }
        },
    )
}

/// A page that says what went wrong.
pub fn problem(viewer: Option<&Viewer>, ns: &str, status: u16, message: &str) -> Markup {
    page(
        "Problem",
        viewer,
        ns,
        None,
        html! {
            h1 { "Request refused (" (status) ")" }
            p.error { (message) }
            p { a href=(link("/ui/runs", &[("ns", ns)])) { "back to the runs" } }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_encode_and_payloads_escape_and_cut() {
        assert_eq!(
            link("/ui/run", &[("wf", "a&b <c>"), ("run", ""), ("ns", "x y")]),
            "/ui/run?wf=a%26b+%3Cc%3E&ns=x+y"
        );
        let short = payload(&Value::String("<script>x</script>".into()), "/w").into_string();
        assert!(short.contains("&lt;script&gt;x&lt;/script&gt;"), "{short}");
        let long = payload(&Value::String("y".repeat(1000)), "/ui/whole").into_string();
        assert!(long.contains("show all 1000 bytes") && long.contains("href=\"/ui/whole\""));
        assert!(!long.contains(&"y".repeat(401)));
        assert_eq!(time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(duration(65_500), "1 min 5 s");
    }
}
