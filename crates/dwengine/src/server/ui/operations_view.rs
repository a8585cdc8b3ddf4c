//! The operations page: workers and task queues with their last poll,
//! schedules, the cache families' key counts beside their declared bounds,
//! server-wide counts, and charts of the sampled `dw_*` series.

use maud::{html, Markup};

use crate::server::ui::chart;
use crate::server::ui::data::Operations;
use crate::server::ui::layout::{self, link, time, Tab};
use crate::server::ui::samples::Snapshot;
use crate::server::ui::session::Viewer;

/// A declared cache family: its policy id, prefix and reviewed bound.
pub struct Family<'a> {
    /// Policy id.
    pub id: &'a str,
    /// Key prefix.
    pub prefix: &'a str,
    /// The reviewed `bound` sentence.
    pub bound: &'a str,
    /// The reviewed `ttl` sentence.
    pub ttl: &'a str,
}

/// The operations page of `ns`.
pub fn render(
    viewer: &Viewer,
    ns: &str,
    ops: &Operations,
    families: &[Family<'_>],
    charts: &Snapshot,
) -> Markup {
    let body = html! {
        h1 { "Operations" }
        h2 { "Server" }
        dl.summary {
            @for (name, value) in ops.operator["runs"].as_object().into_iter().flatten() {
                dt { "runs " (name) } dd { (value) }
            }
            @for (name, value) in ops.operator["tasks"].as_object().into_iter().flatten() {
                dt { "tasks " (name) } dd { (value) }
            }
            dt { "workers registered" } dd { (ops.operator["workers"]["registered"]) }
        }
        h2 { "Task queues in " (ns) }
        table.queues {
            thead { tr { th { "task queue" } th { "workflow ready" } th { "workflow leased" } th { "activity ready" } th { "activity leased" } th { "last poll" } } }
            tbody {
                @for (q, last) in &ops.queues {
                    tr {
                        td { (q.task_queue) } td { (q.workflow_ready) } td { (q.workflow_leased) }
                        td { (q.activity_ready) } td { (q.activity_leased) }
                        td { @if last.is_null() { span.muted { "none in 15 min" } } @else {
                            (last["worker_id"].as_str().unwrap_or("")) " · " (last["kind"].as_str().unwrap_or(""))
                            " · " (last["outcome"].as_str().unwrap_or("")) " · " (last["at_ms"].as_i64().map(time).unwrap_or_default())
                        } }
                    }
                }
                @if ops.queues.is_empty() { tr { td colspan="6" .muted { "No task queue state." } } }
            }
        }
        @if ops.more_queues {
            @if let Some((last, _)) = ops.queues.last() {
                p.pager { a href=(link("/ui/operations", &[("ns", ns), ("queues", &last.task_queue)])) { "more queues »" } }
            }
        }
        h2 { "Workers in " (ns) }
        table.workers {
            thead { tr { th { "worker id" } th { "task queue" } th { "last heartbeat" } } }
            tbody {
                @for w in &ops.workers {
                    tr { td { (w.worker_id) } td { (w.task_queue) } td { (time(w.last_heartbeat_ms)) } }
                }
                @if ops.workers.is_empty() { tr { td colspan="3" .muted { "No registered workers." } } }
            }
        }
        @if ops.more_workers {
            @if let Some(last) = ops.workers.last() {
                p.pager { a href=(link("/ui/operations", &[("ns", ns), ("workers", &last.worker_id)])) { "more workers »" } }
            }
        }
        h2 { "Schedules in " (ns) }
        table.schedules {
            thead { tr { th { "schedule id" } th { "workflow type" } th { "status" } th { "next fire" } th { "fired" } th { "failed" } } }
            tbody {
                @for s in ops.schedules["schedules"].as_array().into_iter().flatten() {
                    tr {
                        td { (s["schedule_id"].as_str().unwrap_or("")) }
                        td { (s["action"]["workflow_type"].as_str().unwrap_or("")) }
                        td { (s["status"].as_str().unwrap_or("")) }
                        td { (s["next_fire_at"].as_str().unwrap_or("—")) }
                        td { (s["fires_count"].as_u64().unwrap_or(0)) }
                        td { (s["failures_count"].as_u64().unwrap_or(0)) }
                    }
                }
            }
        }
        @if let Some(next) = ops.schedules["next_page_token"].as_str() {
            p.pager { a href=(link("/ui/operations", &[("ns", ns), ("schedules", next)])) { "more schedules »" } }
        }
        h2 { "Cache families (" (ops.cache_backend) ")" }
        table.caches {
            thead { tr { th { "policy id" } th { "prefix" } th { "keys now" } th { "declared bound" } th { "ttl" } } }
            tbody {
                @for f in families {
                    tr {
                        td { (f.id) } td { code { (f.prefix) } }
                        td.count { (ops.cache_keys.get(f.id).copied().unwrap_or(0)) }
                        td { (f.bound) } td { (f.ttl) }
                    }
                }
            }
        }
        h2 { "dw_* series in " (charts.namespace) }
        p.note { (charts.times_ms.len()) " samples"
            @if let (Some(a), Some(b)) = (charts.times_ms.first(), charts.times_ms.last()) { " from " (time(*a)) " to " (time(*b)) }
            "; at most " (charts.series_cap) " series are kept"
            @if charts.suppressed > 0 { " (" (charts.suppressed) " more in the last sample were not kept)" } "." }
        div.charts {
            @for s in &charts.series { (chart::line(s, &charts.times_ms)) }
        }
        @if charts.series.is_empty() { p.muted { "No samples yet." } }
    };
    layout::page("Operations", Some(viewer), ns, Some(Tab::Operations), body)
}
