//! The runs list page: filters, one page of runs, the next-page link.

use maud::{html, Markup};

use crate::server::ui::data::{RunsPage, RunsQuery};
use crate::server::ui::layout::{self, link, run_link, time, Tab};
use crate::server::ui::session::Viewer;

/// The statuses the filter offers (the API's).
const STATUSES: [&str; 5] = ["running", "completed", "failed", "cancelled", "terminated"];

/// The runs list of `query`'s namespace.
pub fn render(viewer: &Viewer, query: &RunsQuery, page: &RunsPage) -> Markup {
    let ns = query.namespace();
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let body = html! {
        h1 { "Runs in " (ns) }
        form.filters method="get" action="/ui/runs" {
            input type="hidden" name="ns" value=(ns);
            label { "workflow id" input name="workflow_id" value=(value(&query.workflow_id)) size="28"; }
            label { "status"
                select name="status" {
                    option value="" { "any" }
                    @for s in STATUSES {
                        option value=(s) selected[query.status.as_deref() == Some(s)] { (s) }
                    }
                }
            }
            label { "type" input name="type" value=(value(&query.workflow_type)); }
            label { "search attribute" input name="attr" value=(value(&query.attr)) size="14"; }
            label { "= value" input name="value" value=(value(&query.value)) size="14"; }
            button type="submit" { "Filter" }
            a href=(link("/ui/runs", &[("ns", ns)])) { "clear" }
        }
        @if let Some(examined) = page.examined {
            p.note { "A search-attribute filter walks the newest runs a page at a time: this page examined "
                (examined) " runs." }
        }
        @if let Some(note) = &page.note { p.note { (note) } }
        table.runs {
            thead { tr { th { "workflow id" } th { "run" } th { "type" } th { "task queue" } th { "status" } th { "started" } th { "closed" } } }
            tbody {
                @for line in &page.runs {
                    @let d = &line.described;
                    @let wf = d["workflow_id"].as_str().unwrap_or("");
                    @let run = d["run_id"].as_str().unwrap_or("");
                    @let status = d["status"].as_str().unwrap_or("");
                    tr {
                        td.wf { a href=(run_link(ns, wf, run)) { (wf) } }
                        td { (run) }
                        td { (d["workflow_type"].as_str().unwrap_or("")) }
                        td { (d["task_queue"].as_str().unwrap_or("")) }
                        td { span class=(format!("status {status}")) { (status) } }
                        td { (time(line.started_at_ms)) }
                        td { @if let Some(closed) = line.closed_at_ms { (time(closed)) } }
                    }
                }
                @if page.runs.is_empty() { tr { td colspan="7" .muted { "No runs on this page." } } }
            }
        }
        div.pager {
            @if query.page.as_deref().is_some_and(|p| !p.is_empty()) {
                a href=(link("/ui/runs", &filters(query, None))) { "« newest" }
            }
            @if let Some(next) = &page.next {
                a.next href=(link("/ui/runs", &filters(query, Some(next)))) { "older runs »" }
            }
        }
    };
    layout::page("Runs", Some(viewer), ns, Some(Tab::Runs), body)
}

fn filters<'a>(query: &'a RunsQuery, page: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let get = |v: &'a Option<String>| v.as_deref().unwrap_or("");
    vec![
        ("ns", query.namespace()),
        ("status", get(&query.status)),
        ("type", get(&query.workflow_type)),
        ("attr", get(&query.attr)),
        ("value", get(&query.value)),
        ("page", page.unwrap_or("")),
    ]
}
