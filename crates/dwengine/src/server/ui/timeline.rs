//! A run's history as a timeline: activities, timers, signals, updates and
//! children as spans over time, drawn server-side as inline SVG.
//!
//! [`spans`] pairs each opening event (`ActivityScheduled`,
//! `TimerScheduled`, `SignalReceived`, `UpdateAccepted`,
//! `ChildWorkflowStarted`) with the event that closes it on the same id;
//! a span whose close is not in the page stays open to the page's last
//! event. It reads one history page only, so its cost is the page's.

use maud::{html, Markup};
use serde_json::Value;

/// What a span stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// An activity execution.
    Activity,
    /// A timer.
    Timer,
    /// A signal, from receipt to processing.
    Signal,
    /// An update, from acceptance to its outcome.
    Update,
    /// A child workflow.
    Child,
}

impl Lane {
    /// The CSS class and the legend's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Activity => "activity",
            Lane::Timer => "timer",
            Lane::Signal => "signal",
            Lane::Update => "update",
            Lane::Child => "child",
        }
    }

    /// The lane an event opens, with the payload keys that name its item.
    fn opened_by(event_type: &str) -> Option<(Lane, &'static [&'static str])> {
        Some(match event_type {
            "ActivityScheduled" => (Lane::Activity, &["activity_execution_id", "activity_id"]),
            "TimerScheduled" | "TimerStarted" => (Lane::Timer, &["timer_id"]),
            "SignalReceived" => (Lane::Signal, &["signal_id"]),
            "UpdateAccepted" => (Lane::Update, &["update_id"]),
            "ChildWorkflowStarted" | "ChildWorkflowScheduled" => (Lane::Child, CHILD_KEYS),
            _ => return None,
        })
    }

    /// The lane an event closes, and whether it closes it as a failure.
    fn closed_by(event_type: &str) -> Option<(Lane, bool)> {
        Some(match event_type {
            "ActivityCompleted" => (Lane::Activity, false),
            "ActivityFailed" | "ActivityTimedOut" => (Lane::Activity, true),
            "TimerFired" | "TimerCancelled" => (Lane::Timer, false),
            "SignalProcessed" => (Lane::Signal, false),
            "UpdateApplied" | "UpdateCompleted" => (Lane::Update, false),
            "UpdateRejected" => (Lane::Update, true),
            "ChildWorkflowClosed" | "ChildRunCompleted" => (Lane::Child, false),
            "ChildRunFailed" | "ChildRunCancelled" | "ChildRunTerminated" => (Lane::Child, true),
            _ => return None,
        })
    }
}

/// The payload keys naming a child: the in-process executor's run id, or
/// the instance id a wire child keeps across its retries and continues.
const CHILD_KEYS: &[&str] = &[
    "child_run_id",
    "child_workflow_instance_id",
    "child_workflow_id",
];

/// One span of the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// What it is.
    pub lane: Lane,
    /// Its label: the activity type, signal name, timer delay, …
    pub label: String,
    /// The opening event's id (1-based, as the API numbers events).
    pub opened_event: u64,
    /// The closing event's id, when the page holds it.
    pub closed_event: Option<u64>,
    /// When it opened (Unix ms).
    pub start_ms: i64,
    /// When it closed, or the page's last event time while open.
    pub end_ms: i64,
    /// Whether it ended in failure (failed, timed out, rejected).
    pub failed: bool,
}

/// A run-level event the timeline marks: the run's end, a failure.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// The event's id.
    pub event: u64,
    /// Its type.
    pub event_type: String,
    /// When (Unix ms).
    pub at_ms: i64,
    /// A failure's details: category, and for a structural limit its kind,
    /// current value and configured bound.
    pub detail: Option<String>,
}

/// `structural_limit: pending_activity_count 20 / 20`, or the category and
/// message of another failure.
fn failure_detail(payload: &Value) -> Option<String> {
    let text = |k: &str| payload.get(k).and_then(key_text);
    let category = text("failure_category");
    match (text("structural_limit_kind"), category) {
        (Some(kind), category) => Some(format!(
            "{}: {kind} {} / {}",
            category.unwrap_or_else(|| "structural_limit".into()),
            text("structural_limit_value").unwrap_or_else(|| "?".into()),
            text("structural_limit_configured").unwrap_or_else(|| "?".into()),
        )),
        (None, Some(category)) => Some(match text("message") {
            Some(message) => format!("{category}: {}", truncate(&message, 80)),
            None => category,
        }),
        (None, None) => text("message").map(|m| truncate(&m, 80)),
    }
}

/// The spans and markers of one history page.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Timeline {
    /// Spans in opening order.
    pub spans: Vec<Span>,
    /// Run-level markers (terminal events, workflow task failures).
    pub markers: Vec<Marker>,
    /// The page's first and last event times.
    pub window: Option<(i64, i64)>,
}

fn at_ms(event: &Value) -> Option<i64> {
    let text = event["recorded_at"].as_str()?;
    let stamp: jiff::Timestamp = text.parse().ok()?;
    Some(stamp.as_millisecond())
}

fn key_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn label(lane: Lane, payload: &Value) -> String {
    let text = |k: &str| payload.get(k).and_then(key_text);
    match lane {
        Lane::Activity => text("activity_type").unwrap_or_else(|| "activity".into()),
        Lane::Timer => match text("delay_seconds") {
            Some(s) => format!("timer {s}s"),
            None => "timer".into(),
        },
        Lane::Signal => text("name")
            .or_else(|| text("signal_name"))
            .unwrap_or_else(|| "signal".into()),
        Lane::Update => text("name")
            .or_else(|| text("update_name"))
            .unwrap_or_else(|| "update".into()),
        Lane::Child => text("workflow_type")
            .or_else(|| text("child_workflow_id"))
            .unwrap_or_else(|| "child".into()),
    }
}

/// The timeline of `events` (the API's history page `events` array).
pub fn spans(events: &[Value]) -> Timeline {
    let mut timeline = Timeline::default();
    // Open spans by (lane, item key); few per page, so a vector is enough.
    let mut open: Vec<((Lane, String), usize)> = Vec::new();
    let mut first = None;
    let mut last = None;
    for event in events {
        let Some(at) = at_ms(event) else { continue };
        first.get_or_insert(at);
        last = Some(at);
        let id = event["sequence"].as_u64().unwrap_or(0);
        let event_type = event["event_type"].as_str().unwrap_or("");
        let payload = &event["payload"];
        if let Some((lane, keys)) = Lane::opened_by(event_type) {
            let key = keys
                .iter()
                .find_map(|k| payload.get(*k).and_then(key_text))
                .unwrap_or_else(|| format!("event-{id}"));
            open.push(((lane, key), timeline.spans.len()));
            timeline.spans.push(Span {
                lane,
                label: label(lane, payload),
                opened_event: id,
                closed_event: None,
                start_ms: at,
                end_ms: at,
                failed: false,
            });
        } else if let Some((lane, failed)) = Lane::closed_by(event_type) {
            let keys: &[&str] = match lane {
                Lane::Activity => &["activity_execution_id", "activity_id"],
                Lane::Timer => &["timer_id"],
                Lane::Signal => &["signal_id"],
                Lane::Update => &["update_id"],
                Lane::Child => CHILD_KEYS,
            };
            let found = keys.iter().find_map(|k| {
                let key = payload.get(*k).and_then(key_text)?;
                open.iter()
                    .position(|((l, open_key), _)| *l == lane && *open_key == key)
            });
            if let Some(position) = found {
                let (_, index) = open.remove(position);
                let span = &mut timeline.spans[index];
                span.closed_event = Some(id);
                span.end_ms = at;
                span.failed = failed;
            }
        } else if matches!(
            event_type,
            "WorkflowCompleted"
                | "WorkflowFailed"
                | "WorkflowCancelled"
                | "WorkflowTerminated"
                | "WorkflowTimedOut"
                | "WorkflowTaskFailed"
                | "ExceptionRecorded"
        ) {
            timeline.markers.push(Marker {
                event: id,
                event_type: event_type.to_owned(),
                at_ms: at,
                detail: failure_detail(payload),
            });
        }
    }
    if let Some(end) = last {
        for (_, index) in open {
            timeline.spans[index].end_ms = end;
        }
    }
    timeline.window = first.zip(last);
    timeline
}

const WIDTH: f64 = 1000.0;
const LABEL_WIDTH: f64 = 180.0;
const ROW: f64 = 18.0;

/// The timeline as inline SVG, one row per span, with an `id` per span
/// (`event-N`, the opening event) so a link can point at it.
pub fn render(timeline: &Timeline) -> Markup {
    let Some((start, end)) = timeline.window else {
        return html! { p.muted { "No events with times on this page." } };
    };
    let spread = (end - start).max(1) as f64;
    let x = |ms: i64| LABEL_WIDTH + (ms - start) as f64 / spread * (WIDTH - LABEL_WIDTH - 10.0);
    let rows = timeline.spans.len() + timeline.markers.len();
    let height = (rows as f64 + 2.0) * ROW;
    html! {
        svg.timeline xmlns="http://www.w3.org/2000/svg" width="100%" viewBox=(format!("0 0 {WIDTH} {height}")) role="img" aria-label="run timeline" {
            g.axis {
                line x1=(LABEL_WIDTH) y1=(0) x2=(LABEL_WIDTH) y2=(height) {}
                text x=(LABEL_WIDTH + 2.0) y=(height - 4.0) { "+0" }
                text x=(WIDTH - 80.0) y=(height - 4.0) { "+" (crate::server::ui::layout::duration(end - start)) }
            }
            @for (row, span) in timeline.spans.iter().enumerate() {
                @let y = row as f64 * ROW + 4.0;
                @let x0 = x(span.start_ms);
                @let w = (x(span.end_ms) - x0).max(3.0);
                g id=(format!("event-{}", span.opened_event))
                  class=(format!("span {}{}{}", span.lane.as_str(),
                        if span.failed { " failed" } else { "" },
                        if span.closed_event.is_none() { " open" } else { "" })) {
                    title { (span.lane.as_str()) " " (span.label) ": event " (span.opened_event)
                        @if let Some(closed) = span.closed_event { "–" (closed) } @else { " (open)" }
                        ", " (crate::server::ui::layout::duration(span.end_ms - span.start_ms)) }
                    text x="4" y=(y + 11.0) { (span.lane.as_str()) " · " (truncate(&span.label, 22)) }
                    rect x=(x0) y=(y) width=(w) height=(ROW - 6.0) rx="2" {}
                }
            }
            @for (row, marker) in timeline.markers.iter().enumerate() {
                @let mx = x(marker.at_ms);
                @let label_y = (timeline.spans.len() + row) as f64 * ROW + 15.0;
                g.marker id=(format!("event-{}", marker.event)) {
                    title { (marker.event_type) " (event " (marker.event) ")"
                        @if let Some(detail) = &marker.detail { ": " (detail) } }
                    text.marker-label x="4" y=(label_y) { (marker.event_type)
                        @if let Some(detail) = &marker.detail { " · " (detail) } }
                    @if marker.event_type == "WorkflowCompleted" {
                        line x1=(mx) y1="0" x2=(mx) y2=(height - ROW) stroke="#2f855a" stroke-width="2" {}
                    } @else {
                        line.failure-mark x1=(mx) y1="0" x2=(mx) y2=(height - ROW) stroke="#c53030" stroke-width="2" {}
                    }
                }
            }
        }
    }
}

fn truncate(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(chars).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(id: u64, at_ms: i64, event_type: &str, payload: Value) -> Value {
        json!({ "id": id.to_string(), "sequence": id, "event_type": event_type, "payload": payload,
                "recorded_at": crate::server::wire::timestamp(at_ms) })
    }

    #[test]
    fn opening_and_closing_events_pair_on_their_item_ids() {
        let events = vec![
            event(1, 1_000, "WorkflowStarted", json!({})),
            event(
                2,
                1_100,
                "ActivityScheduled",
                json!({ "activity_execution_id": "7", "activity_type": "greet" }),
            ),
            event(
                3,
                1_200,
                "TimerScheduled",
                json!({ "timer_id": "3", "delay_seconds": 5 }),
            ),
            event(
                4,
                1_300,
                "ActivityScheduled",
                json!({ "activity_execution_id": "8", "activity_type": "<b>x</b>" }),
            ),
            event(
                5,
                1_900,
                "ActivityCompleted",
                json!({ "activity_execution_id": "7" }),
            ),
            event(6, 6_200, "TimerFired", json!({ "timer_id": "3" })),
            event(
                7,
                6_300,
                "ActivityFailed",
                json!({ "activity_execution_id": 8 }),
            ),
            event(
                8,
                6_400,
                "SignalReceived",
                json!({ "signal_id": "1", "name": "go" }),
            ),
            event(
                9,
                6_500,
                "WorkflowFailed",
                json!({ "failure_category": "structural_limit",
                "structural_limit_kind": "pending_activity_count", "structural_limit_value": 20,
                "structural_limit_configured": 20 }),
            ),
        ];
        let t = spans(&events);
        assert_eq!(t.window, Some((1_000, 6_500)));
        let summary: Vec<_> = t
            .spans
            .iter()
            .map(|s| {
                (
                    s.lane,
                    s.label.as_str(),
                    s.opened_event,
                    s.closed_event,
                    s.end_ms - s.start_ms,
                    s.failed,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (Lane::Activity, "greet", 2, Some(5), 800, false),
                (Lane::Timer, "timer 5s", 3, Some(6), 5_000, false),
                (Lane::Activity, "<b>x</b>", 4, Some(7), 5_000, true),
                // Still open at the page's end.
                (Lane::Signal, "go", 8, None, 100, false),
            ]
        );
        assert_eq!(t.markers.len(), 1);
        assert_eq!(
            t.markers[0].detail.as_deref(),
            Some("structural_limit: pending_activity_count 20 / 20")
        );
        let svg = render(&t).into_string();
        assert!(svg.contains("id=\"event-2\"") && svg.contains("id=\"event-9\""));
        assert!(
            svg.contains("&lt;b&gt;x&lt;/b&gt;") && !svg.contains("<b>x"),
            "{svg}"
        );
        assert!(svg.contains("span activity failed"));
        assert!(svg.contains("WorkflowFailed · structural_limit: pending_activity_count 20 / 20"));
    }
}
