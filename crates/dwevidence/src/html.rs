//! `report.html`: a soak as people look at it rather than read it.
//!
//! One self-contained file (inline CSS and SVG, no script, no network), so
//! it can be attached to a CI run and opened anywhere: the trust verdict
//! with every condition of the profile, the run's key figures, and charts
//! of server memory (with the post-warmup slope fit and the slope limit),
//! Redis memory, the `server:*` total and the keys per cache policy (with
//! each policy's thresholds as dashed lines), the post-drain sample marked.
//! The charts are drawn by `plotters`' SVG backend. The harness writes it
//! after a run; `dwlint evidence verify --format html` renders the same for
//! any artifact, with the verifier's own verdict.

use std::fmt::Write as _;

use plotters::prelude::*;

use crate::profile::{Condition, ConditionFailure};
use crate::sample::{Sample, SampleKind};
use crate::summary::Summary;

/// What the report shows besides the artifact itself.
#[derive(Debug, Clone, Default)]
pub struct Context<'a> {
    /// Where the artifact came from, shown in the heading.
    pub source: &'a str,
    /// Notes from whoever renders (e.g. a recorded verdict that disagrees).
    pub notes: Vec<String>,
}

/// Renders the report.
pub fn render(
    summary: &Summary,
    samples: &[Sample],
    failures: &[ConditionFailure],
    context: &Context,
) -> String {
    let mut html = String::new();
    let eligible = failures.is_empty();
    let _ = writeln!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Soak report: {}</title>\n<style>{STYLE}</style></head><body>",
        escape(context.source)
    );
    let _ = writeln!(
        html,
        "<h1>Soak report</h1><p class=\"source\">{}</p>\n<p class=\"verdict {}\">{}: {}</p>",
        escape(context.source),
        if eligible { "ok" } else { "bad" },
        escape(&summary.evidence.trust.profile),
        if eligible {
            "trusted evidence".to_owned()
        } else {
            format!(
                "not trusted ({} of {} conditions failed)",
                failures.len(),
                Condition::ALL.len()
            )
        }
    );
    for note in &context.notes {
        let _ = writeln!(html, "<p class=\"note\">{}</p>", escape(note));
    }
    figures(&mut html, summary);
    conditions(&mut html, failures);
    charts(&mut html, summary, samples);
    html.push_str("</body></html>\n");
    html
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}\
.verdict{font-size:1.3em;font-weight:bold}.ok{color:#1a7f37}.bad{color:#cf222e}.source{color:#666}\
.note{background:#fff8c5;padding:6px}figure{margin:1.5em 0}figcaption{font-weight:bold}";

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn opt(value: Option<u64>) -> String {
    value.map_or_else(|| "not measured".to_owned(), |v| v.to_string())
}

fn mib(value: Option<u64>) -> String {
    value.map_or_else(
        || "not measured".to_owned(),
        |v| format!("{:.1} MiB", v as f64 / 1_048_576.0),
    )
}

fn figures(html: &mut String, s: &Summary) {
    let rows = [
        ("Result", format!("{:?}{}", s.run.result, if s.run.failures.is_empty() { String::new() } else { format!(": {}", s.run.failures.join("; ")) })),
        ("Load", format!("{:.0} s of {} s configured, {} cache, {:?} services", s.run.load_seconds, s.config.duration_seconds, s.config.cache_backend, s.config.services)),
        ("Periodic samples", format!("{} of {} ({:.1} %; minimum {}), post-drain sample {}", s.samples.periodic_sample_count, s.samples.expected_periodic_samples, s.samples.coverage * 100.0, s.config.minimum_trusted_samples, if s.samples.final_sample_collected { "taken" } else { "missing" })),
        ("Server memory", format!("max {}, after drain {}", mib(s.maxima.server_memory_bytes), mib(s.final_drain.server_memory_bytes))),
        ("Memory slope", s.memory_slope.as_ref().map_or_else(|| "not fitted".to_owned(), |m| format!("{:.0} bytes/hour over {} post-warmup samples (limit {})", m.bytes_per_hour, m.points, m.limit_bytes_per_hour.map_or("none".to_owned(), |l| format!("{l:.0}"))))),
        ("Redis memory", mib(s.maxima.redis_memory_bytes)),
        ("server:* keys", format!("max {}, after drain {}", opt(s.maxima.server_cache_keys), opt(s.final_drain.server_cache_keys))),
        ("Redis keys", format!("max {}, after drain {}", opt(s.maxima.redis_db_keys), opt(s.final_drain.redis_db_keys))),
        ("SQLite file", mib(s.maxima.sqlite_file_bytes)),
        ("Requests", format!("{} ({} failed), mean latency {:.1} ms; {} workflows started, {} signals, {} completed", s.requests.total, s.requests.errors, s.requests.latency_seconds_average * 1000.0, s.requests.workflows_started, s.requests.signals_sent, s.requests.workflows_completed)),
        ("Commit", format!("{} (tracked tree clean: {})", s.provenance.git_sha.as_deref().unwrap_or("unknown"), s.provenance.tracked_working_tree_clean.map_or("unknown".to_owned(), |c| c.to_string()))),
    ];
    html.push_str("<h2>Key figures</h2><table>\n");
    for (name, value) in rows {
        let _ = writeln!(html, "<tr><th>{name}</th><td>{}</td></tr>", escape(&value));
    }
    html.push_str("</table>\n");
    if !s.assertion_failures.is_empty() {
        html.push_str("<h2>Bounded-growth assertion failures</h2><ul>\n");
        for a in &s.assertion_failures {
            let _ = writeln!(
                html,
                "<li><code>{}</code>: {}</li>",
                escape(&a.assertion),
                escape(&a.message)
            );
        }
        html.push_str("</ul>\n");
    }
}

fn conditions(html: &mut String, failures: &[ConditionFailure]) {
    html.push_str("<h2>Trust conditions</h2><table><tr><th>Condition</th><th>Verdict</th><th>Requirement / why it failed</th></tr>\n");
    for condition in Condition::ALL {
        let failure = failures.iter().find(|f| f.condition == condition);
        let _ = writeln!(
            html,
            "<tr><td><code>{}</code></td><td class=\"{}\">{}</td><td>{}</td></tr>",
            condition.id(),
            if failure.is_some() { "bad" } else { "ok" },
            if failure.is_some() { "failed" } else { "holds" },
            escape(failure.map_or(condition.requirement(), |f| f.explanation.as_str()))
        );
    }
    html.push_str("</table>\n");
}

/// One line of a chart.
struct Line {
    label: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    dashed: bool,
    /// Thresholds share their policy's colour and the caption explains
    /// them, so they stay out of the legend.
    legend: bool,
}

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn series(samples: &[Sample], get: impl Fn(&Sample) -> Option<u64>, scale: f64) -> Vec<(f64, f64)> {
    samples
        .iter()
        .filter_map(|s| Some((s.elapsed_seconds, get(s)? as f64 / scale)))
        .collect()
}

fn charts(html: &mut String, s: &Summary, samples: &[Sample]) {
    html.push_str("<h2>Over time</h2>\n");
    if samples.is_empty() {
        html.push_str("<p>No samples.jsonl next to the summary: nothing to chart.</p>\n");
        return;
    }
    let end = samples
        .iter()
        .map(|x| x.elapsed_seconds)
        .fold(1.0, f64::max);
    let drain_at = samples
        .iter()
        .find(|x| x.kind == SampleKind::Final)
        .map(|x| x.elapsed_seconds);
    let mib_scale = 1_048_576.0;

    let mut memory = vec![Line {
        label: "server RSS".into(),
        points: series(samples, |x| x.server_memory_bytes, mib_scale),
        color: PALETTE[0],
        dashed: false,
        legend: true,
    }];
    if let Some(slope) = &s.memory_slope {
        let from = s.config.warmup_seconds as f64;
        let to = s.config.duration_seconds as f64;
        let at = |t: f64| (slope.intercept_bytes + slope.bytes_per_hour / 3600.0 * t) / mib_scale;
        memory.push(Line {
            label: format!("slope fit {:.0} B/h", slope.bytes_per_hour),
            points: vec![(from, at(from)), (to, at(to))],
            color: PALETTE[3],
            dashed: true,
            legend: true,
        });
        if let Some(limit) = slope.limit_bytes_per_hour {
            let limit_at = |t: f64| (slope.intercept_bytes + limit / 3600.0 * t) / mib_scale;
            memory.push(Line {
                label: format!("slope limit {limit:.0} B/h"),
                points: vec![(from, limit_at(from)), (to, limit_at(to))],
                color: PALETTE[7],
                dashed: true,
                legend: true,
            });
        }
    }
    chart(html, "Server memory (MiB)", &memory, end, drain_at);

    let redis = series(samples, |x| x.redis_memory_bytes, mib_scale);
    if !redis.is_empty() {
        chart(
            html,
            "Redis memory (MiB)",
            &[Line {
                label: "used_memory".into(),
                points: redis,
                color: PALETTE[1],
                dashed: false,
                legend: true,
            }],
            end,
            drain_at,
        );
    }
    let mut totals = vec![Line {
        label: "server:* keys".into(),
        points: series(samples, |x| x.server_cache_keys, 1.0),
        color: PALETTE[2],
        dashed: false,
        legend: true,
    }];
    let db = series(samples, |x| x.redis_db_keys, 1.0);
    if !db.is_empty() {
        totals.push(Line {
            label: "Redis keys".into(),
            points: db,
            color: PALETTE[4],
            dashed: true,
            legend: true,
        });
    }
    chart(html, "Cache keys, total", &totals, end, drain_at);

    let mut per_policy = Vec::new();
    for (i, (id, max)) in s.max_server_cache_keys_by_policy.iter().enumerate() {
        if *max == 0 {
            continue;
        }
        let color = PALETTE[i % PALETTE.len()];
        per_policy.push(Line {
            label: id.clone(),
            points: series(
                samples,
                |x| x.server_cache_keys_by_policy.get(id).copied(),
                1.0,
            ),
            color,
            dashed: false,
            legend: true,
        });
        if let Some(limit) = s
            .config
            .max_server_cache_keys_by_policy
            .as_ref()
            .and_then(|m| m.get(id))
        {
            per_policy.push(Line {
                label: format!("{id} max"),
                points: vec![(0.0, *limit as f64), (end, *limit as f64)],
                color,
                dashed: true,
                legend: false,
            });
        }
        if let Some(limit) = s
            .config
            .max_final_server_cache_keys_by_policy
            .as_ref()
            .and_then(|m| m.get(id))
        {
            if let Some(at) = drain_at {
                per_policy.push(Line {
                    label: format!("{id} final max"),
                    points: vec![(at - end * 0.02, *limit as f64), (at, *limit as f64)],
                    color,
                    dashed: true,
                    legend: false,
                });
            }
        }
    }
    if per_policy.is_empty() {
        html.push_str("<p>No cache policy held a key during the run.</p>\n");
    } else {
        chart(
            html,
            "Keys per cache policy (dashed: thresholds; empty policies left out)",
            &per_policy,
            end,
            drain_at,
        );
        let limits: Vec<String> = s
            .max_server_cache_keys_by_policy
            .iter()
            .filter(|(_, max)| **max > 0)
            .map(|(id, max)| {
                let limit = |map: &Option<std::collections::BTreeMap<String, u64>>| {
                    map.as_ref()
                        .and_then(|m| m.get(id))
                        .map_or("none".to_owned(), u64::to_string)
                };
                format!(
                    "{id}: peak {max} (limit {}), after drain {} (limit {})",
                    limit(&s.config.max_server_cache_keys_by_policy),
                    s.final_server_cache_keys_by_policy
                        .get(id)
                        .map_or("not measured".to_owned(), u64::to_string),
                    limit(&s.config.max_final_server_cache_keys_by_policy)
                )
            })
            .collect();
        let _ = writeln!(html, "<p>{}</p>", escape(&limits.join("; ")));
    }
}

/// Draws one line chart into `html` as an inline SVG figure.
fn chart(html: &mut String, title: &str, lines: &[Line], end: f64, drain_at: Option<f64>) {
    let top = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max)
        .max(1.0)
        * 1.1;
    let mut svg = String::new();
    let drawn = (|| -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::with_string(&mut svg, (1000, 380)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..end * 1.02, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the load started")
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        if let Some(at) = drain_at {
            chart
                .draw_series(LineSeries::new(
                    vec![(at, 0.0), (at, top)],
                    BLACK.mix(0.3).stroke_width(1),
                ))?
                .label("post-drain sample")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.mix(0.3)));
        }
        for line in lines {
            let style = line.color.stroke_width(if line.dashed { 1 } else { 2 });
            let anno = if line.dashed {
                chart.draw_series(DashedLineSeries::new(
                    line.points.iter().copied(),
                    6,
                    4,
                    style,
                ))?
            } else {
                chart.draw_series(LineSeries::new(line.points.iter().copied(), style))?
            };
            if line.legend {
                let color = line.color;
                anno.label(line.label.clone()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
        root.present()?;
        Ok(())
    })();
    match drawn {
        Ok(()) => {
            let _ = writeln!(
                html,
                "<figure><figcaption>{}</figcaption>{svg}</figure>",
                escape(title)
            );
        }
        Err(e) => {
            let _ = writeln!(
                html,
                "<p>Chart {} could not be drawn: {}</p>",
                escape(title),
                escape(&e.to_string())
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup() {
        assert_eq!(
            escape("<a href=\"x\">&</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
        );
    }
}
