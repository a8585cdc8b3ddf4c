//! A run's page: summary, structural-limit utilization, failures with their
//! limit kind, value and bound, the timeline, the history page's events,
//! pending activities, and the actions the visitor's role allows; and the
//! confirmation page an action goes through.

use dwpolicy::LimitKind;
use maud::{html, Markup};
use serde_json::Value;

use crate::server::ui::data::RunView;
use crate::server::ui::layout::{self, link, payload, run_link, time, Tab};
use crate::server::ui::session::Viewer;
use crate::server::ui::timeline;

/// The pending counters of a run beside the limit that bounds each.
const PENDING: [(&str, LimitKind); 5] = [
    ("activities", LimitKind::PendingActivityCount),
    ("timers", LimitKind::PendingTimerCount),
    ("children", LimitKind::PendingChildCount),
    ("signals", LimitKind::PendingSignalCount),
    ("updates", LimitKind::PendingUpdateCount),
];

/// An action the console can take on a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send a signal.
    Signal,
    /// Cancel the run.
    Cancel,
    /// Terminate the run.
    Terminate,
}

impl Action {
    /// From the form's `action` field.
    pub fn parse(text: &str) -> Option<Action> {
        match text {
            "signal" => Some(Action::Signal),
            "cancel" => Some(Action::Cancel),
            "terminate" => Some(Action::Terminate),
            _ => None,
        }
    }

    /// The form value and the verb shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Signal => "signal",
            Action::Cancel => "cancel",
            Action::Terminate => "terminate",
        }
    }
}

/// The utilization bar of `current` against `bound`, with the warning mark.
pub fn meter(current: u64, bound: u64, warning_percent: u8) -> Markup {
    let percent = if bound == 0 {
        0.0
    } else {
        (current as f64 / bound as f64 * 100.0).min(100.0)
    };
    let class = if bound > 0 && current >= bound {
        "fill over"
    } else if percent >= f64::from(warning_percent) {
        "fill warn"
    } else {
        "fill"
    };
    // SVG attributes, not inline styles: the console's CSP allows no inline style.
    html! {
        svg.meter xmlns="http://www.w3.org/2000/svg" width="100%" height="14" viewBox="0 0 100 14" preserveAspectRatio="none" role="img"
            aria-label=(format!("{current} of {bound}")) {
            title { (format!("{current} / {bound} ({percent:.0}%), warning at {warning_percent}%")) }
            rect.track x="0" y="2" width="100" height="10" {}
            rect class=(class) x="0" y="2" width=(format!("{percent:.1}")) height="10" {}
            rect.mark x=(f64::from(warning_percent) - 0.5) y="0" width="1" height="14" {}
        }
    }
}

/// The run's page.
pub fn render(viewer: &Viewer, ns: &str, view: &RunView, flash: Option<&str>) -> Markup {
    let d = &view.described;
    let wf = d["workflow_id"].as_str().unwrap_or("");
    let run = d["run_id"].as_str().unwrap_or("");
    let status = d["status"].as_str().unwrap_or("");
    let whole = |field: &str| {
        link(
            "/ui/run/payload",
            &[("ns", ns), ("wf", wf), ("run", run), ("field", field)],
        )
    };
    let warning = view.limits.warning_threshold();
    let events = view.history["events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let timeline = timeline::spans(&events);
    let total = view.history["total_events"].as_u64().unwrap_or(0);
    let body = html! {
        h1 { "Run " (run) " of " span.wf { (wf) } " " span class=(format!("status {status}")) { (status) } }
        @if let Some(flash) = flash { p.flash { (flash) } }
        // Open runs (running or waiting) take actions.
        @if viewer.may_act() && d["status_bucket"] == "running" {
            div.actions {
                @for action in [Action::Signal, Action::Cancel, Action::Terminate] {
                    a class=@if action == Action::Signal { "" } @else { "danger" }
                      href=(link("/ui/run/confirm", &[("ns", ns), ("wf", wf), ("run", run), ("action", action.as_str())])) {
                        (action.as_str()) "…"
                    }
                }
            }
        }
        h2 { "Summary" }
        dl.summary {
            dt { "workflow type" } dd { (d["workflow_type"].as_str().unwrap_or("")) }
            dt { "task queue" } dd { (d["task_queue"].as_str().unwrap_or("")) }
            dt { "started" } dd { (time(view.started_at_ms)) }
            dt { "closed" } dd { (d["closed_at"].as_str().unwrap_or("—")) }
            @if let Some(reason) = d["closed_reason"].as_str() { dt { "closed reason" } dd { (reason) } }
            dt { "execution timeout" } dd { (seconds(&d["execution_timeout_seconds"])) }
            dt { "run timeout" } dd { (seconds(&d["run_timeout_seconds"])) }
            @if let Some(at) = d["execution_deadline_at"].as_str() { dt { "execution deadline" } dd { (at) } }
            @if let Some(at) = d["run_deadline_at"].as_str() { dt { "run deadline" } dd { (at) } }
            dt { "history" } dd { (total) " events, " (d["history_bytes"].as_u64().unwrap_or(0)) " bytes" }
            dt { "memo" } dd { (payload(&d["memo"], &whole("memo"))) }
            dt { "search attributes" } dd { (payload(&d["search_attributes"], &whole("search_attributes"))) }
            dt { "input" } dd { (payload(&d["input_envelope"], &whole("input_envelope"))) }
            @if !d["output_envelope"].is_null() { dt { "output" } dd { (payload(&d["output_envelope"], &whole("output_envelope"))) } }
        }
        h2 { "Structural limits" }
        table.limits {
            thead { tr { th { "pending" } th { "current" } th { "bound" } th { "utilization (mark: " (warning) " % warning)" } } }
            tbody {
                @for (name, kind) in PENDING {
                    @let current = d["pending"][name].as_u64().unwrap_or(0);
                    @let bound = view.limits.get(kind);
                    tr {
                        td { code { (kind.as_str()) } }
                        td.current { (current) }
                        td { (bound) }
                        td.bar { (meter(current, bound, warning)) }
                    }
                }
            }
        }
        @let failures = d["failures"].as_array().cloned().unwrap_or_default();
        @if !failures.is_empty() || !d["workflow_task_failure"].is_null() {
            h2 #failure { "Failure" }
            table.failures {
                thead { tr { th { "category" } th { "message" } th { "limit kind" } th { "current value" } th { "configured bound" } } }
                tbody {
                    @for f in &failures {
                        tr.failure-detail {
                            td.category { (f["failure_category"].as_str().unwrap_or("")) }
                            td { (f["message"].as_str().unwrap_or("")) }
                            td.kind { (f["structural_limit_kind"].as_str().unwrap_or("—")) }
                            td.value { (number(&f["structural_limit_value"])) }
                            td.bound { (number(&f["structural_limit_configured"])) }
                        }
                    }
                    @if !d["workflow_task_failure"].is_null() {
                        tr.failure-detail #workflow-task {
                            td.category { "workflow_task" }
                            td colspan="4" { "attempt " (number(&d["workflow_task_failure"]["workflow_task_attempt"])) ": "
                                (payload(&d["workflow_task_failure"]["failure"], &whole("workflow_task_failure"))) }
                        }
                    }
                }
            }
        }
        h2 { "Timeline" }
        p.muted { "Events " (view.history_offset + 1) "–" (view.history_offset + events.len() as u64) " of " (total)
            ". Activities, timers, signals, updates and children as spans; red lines mark failures." }
        (timeline::render(&timeline))
        div.pager {
            @if view.history_offset > 0 {
                a href=(run_link(ns, wf, run)) { "« first events" }
            }
            @if let Some(next) = view.history["next_page_token"].as_str() {
                a href=(link("/ui/run", &[("ns", ns), ("wf", wf), ("run", run), ("events", next)])) { "later events »" }
            }
        }
        h2 #pending-activities { "Pending activities" }
        @if view.pending_activities.is_empty() {
            p.muted { "None." }
        } @else {
            table.pending {
                thead { tr { th { "id" } th { "type" } th { "state" } th { "attempt" } th { "last failure" } th { "lease owner" } } }
                tbody {
                    @for a in &view.pending_activities {
                        tr {
                            td { (a.id) } td { (a.activity_type) } td { (a.state) } td { (a.attempt) }
                            td { @if let Some(e) = &a.last_error { (payload(&Value::String(e.clone()), &whole("failures"))) } }
                            td { (a.lease_owner.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
            @if d["pending"]["activities"].as_u64().unwrap_or(0) > view.pending_activities.len() as u64 {
                p.muted { "Showing the first " (view.pending_activities.len()) " of " (d["pending"]["activities"]) "." }
            }
        }
        h2 { "History events" }
        table.events {
            thead { tr { th { "#" } th { "type" } th { "recorded" } th { "payload" } } }
            tbody {
                @for e in &events {
                    @let id = e["sequence"].as_u64().unwrap_or(0);
                    tr id=(format!("row-{id}")) {
                        td { (id) }
                        td { (e["event_type"].as_str().unwrap_or("")) }
                        td { (e["recorded_at"].as_str().unwrap_or("")) }
                        td { (payload(&e["payload"], &whole(&format!("event-{}", id.saturating_sub(1))))) }
                    }
                }
            }
        }
    };
    layout::page(
        &format!("Run {run}"),
        Some(viewer),
        ns,
        Some(Tab::Runs),
        body,
    )
}

fn seconds(value: &Value) -> String {
    value
        .as_u64()
        .map_or_else(|| "none".to_owned(), |s| format!("{s} s"))
}

fn number(value: &Value) -> String {
    value
        .as_u64()
        .map_or_else(|| "—".to_owned(), |n| n.to_string())
}

/// The confirmation page of `action` on a run.
pub fn confirm(viewer: &Viewer, ns: &str, wf: &str, run: &str, action: Action) -> Markup {
    let body = html! {
        h1 { "Confirm: " (action.as_str()) " run " (run) }
        p { "Workflow " span.wf { (wf) } " in namespace " (ns) "." }
        @match action {
            Action::Cancel => p { "The run is cancelled at once and ends with status cancelled." },
            Action::Terminate => p { "The run is terminated at once: no workflow code runs again." },
            Action::Signal => p { "The signal is recorded in the run's history and delivered with its next workflow task." },
        }
        form.confirm method="post" action="/ui/run/action" {
            input type="hidden" name="csrf" value=(viewer.csrf);
            input type="hidden" name="ns" value=(ns);
            input type="hidden" name="wf" value=(wf);
            input type="hidden" name="run" value=(run);
            input type="hidden" name="action" value=(action.as_str());
            @if action == Action::Signal {
                p { label { "signal name " input name="name" required; } }
                p { label { "arguments (JSON array) " input name="input" value="[]" size="40"; } }
            } @else {
                p { label { "reason " input name="reason" size="40"; } }
            }
            button.danger type="submit" { "Yes, " (action.as_str()) }
            " "
            a href=(run_link(ns, wf, run)) { "No, go back" }
        }
    };
    layout::page("Confirm", Some(viewer), ns, Some(Tab::Runs), body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_marks_warning_and_exceeded_levels() {
        let quiet = meter(10, 100, 80).into_string();
        assert!(quiet.contains("class=\"fill\"") && quiet.contains("x=\"79.5\""));
        assert!(meter(81, 100, 80).into_string().contains("fill warn"));
        let over = meter(20, 20, 80).into_string();
        assert!(over.contains("fill over") && over.contains("width=\"100.0\""));
        assert!(meter(0, 0, 80).into_string().contains("width=\"0.0\""));
    }
}
