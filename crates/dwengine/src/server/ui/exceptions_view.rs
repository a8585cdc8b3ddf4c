//! The exceptions table: run failures with their category and, for a
//! structural limit, its kind, current value and configured bound; and the
//! open tasks whose last attempt failed. Each row links to its run and the
//! timeline entry.

use maud::{html, Markup};
use serde_json::Value;

use crate::server::ui::data::Exceptions;
use crate::server::ui::layout::{self, link, payload, run_link, time, Tab};
use crate::server::ui::session::Viewer;
use crate::server::wire;

/// The categories the filter offers: the three the engine records on a
/// run's failure row (structural limit, application failure, timeout) and
/// the two kinds of failing task.
pub const CATEGORIES: [&str; 5] = [
    "structural_limit",
    "application",
    "timeout",
    "workflow_task",
    "activity",
];

/// The exceptions page of `ns`, filtered to `category`.
pub fn render(
    viewer: &Viewer,
    ns: &str,
    category: &str,
    found: &Exceptions,
    scan: usize,
) -> Markup {
    let number = |n: Option<u64>| n.map_or_else(|| "—".to_owned(), |n| n.to_string());
    let next = |failures: Option<i64>, tasks: Option<i64>| {
        let f = failures
            .map(|n| wire::page_token(n.unsigned_abs()))
            .unwrap_or_default();
        let t = tasks
            .map(|n| wire::page_token(n.unsigned_abs()))
            .unwrap_or_default();
        link(
            "/ui/exceptions",
            &[
                ("ns", ns),
                ("category", category),
                ("failures", &f),
                ("tasks", &t),
            ],
        )
    };
    let body = html! {
        h1 { "Exceptions in " (ns) }
        form.filters method="get" action="/ui/exceptions" {
            input type="hidden" name="ns" value=(ns);
            label { "category"
                select name="category" {
                    option value="" { "any" }
                    @for c in CATEGORIES { option value=(c) selected[category == c] { (c) } }
                }
            }
            button type="submit" { "Filter" }
        }
        p.note { "Each table walks at most " (scan) " rows per page, newest first." }
        h2 { "Run failures" }
        table.exceptions {
            thead { tr { th { "when" } th { "category" } th { "workflow id" } th { "run" } th { "message" }
                th { "limit kind" } th { "current value" } th { "configured bound" } } }
            tbody {
                @for f in &found.failures.rows {
                    @let run = wire::run_id(f.run);
                    tr {
                        td { (time(f.created_at_ms)) }
                        td.category { (f.category) }
                        td.wf { a href=(format!("{}#failure", run_link(ns, &f.workflow_id, &run))) { (f.workflow_id) } }
                        td { a href=(format!("{}#failure", run_link(ns, &f.workflow_id, &run))) { (run) } }
                        td { (payload(&Value::String(f.message.clone()), &link("/ui/run/payload", &[("ns", ns), ("wf", &f.workflow_id), ("run", &run), ("field", "failures")]))) }
                        td.kind { (f.limit_kind.as_deref().unwrap_or("—")) }
                        td.value { (number(f.limit_value)) }
                        td.bound { (number(f.limit_configured)) }
                    }
                }
                @if found.failures.rows.is_empty() { tr { td colspan="8" .muted { "None on this page." } } }
            }
        }
        @if found.failures.continue_below.is_some() {
            p.pager { a href=(next(found.failures.continue_below, None)) { "older failures »" } }
        }
        h2 { "Failing tasks (open, last attempt failed)" }
        table.tasks {
            thead { tr { th { "category" } th { "workflow id" } th { "run" } th { "attempt" } th { "last failure" } th { "next attempt" } } }
            tbody {
                @for t in &found.tasks.rows {
                    @let run = wire::run_id(t.run);
                    @let anchor = if t.kind == "workflow" { "#workflow-task" } else { "#pending-activities" };
                    tr {
                        td.category { @if t.kind == "workflow" { "workflow_task" } @else { "activity" } }
                        td.wf { a href=(format!("{}{anchor}", run_link(ns, &t.workflow_id, &run))) { (t.workflow_id) } }
                        td { (run) }
                        td { (t.attempt) }
                        td { (payload(&Value::String(t.last_error.clone()), &link("/ui/run/payload", &[("ns", ns), ("wf", &t.workflow_id), ("run", &run), ("field", "workflow_task_failure")]))) }
                        td { (time(t.due_at_ms)) }
                    }
                }
                @if found.tasks.rows.is_empty() { tr { td colspan="6" .muted { "None on this page." } } }
            }
        }
        @if found.tasks.continue_below.is_some() {
            p.pager { a href=(next(None, found.tasks.continue_below)) { "older tasks »" } }
        }
    };
    layout::page("Exceptions", Some(viewer), ns, Some(Tab::Exceptions), body)
}
