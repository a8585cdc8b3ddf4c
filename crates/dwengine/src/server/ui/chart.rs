//! Small line charts of the sampled `dw_*` series, drawn server-side as
//! inline SVG: no script, nothing fetched, and the page's cost is the
//! ring's fixed size.

use maud::{html, Markup};

use crate::server::ui::samples::Series;

const WIDTH: f64 = 320.0;
const HEIGHT: f64 = 90.0;

/// One series over `times_ms` as a polyline with its min and max.
pub fn line(series: &Series, times_ms: &[i64]) -> Markup {
    let points: Vec<(i64, f64)> = times_ms
        .iter()
        .zip(&series.values)
        .filter_map(|(t, v)| v.map(|v| (*t, v)))
        .collect();
    let (Some(first), Some(last)) = (times_ms.first(), times_ms.last()) else {
        return html! {};
    };
    let lo = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let hi = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let span_t = (last - first).max(1) as f64;
    let span_v = if hi > lo { hi - lo } else { 1.0 };
    let xy: Vec<String> = points
        .iter()
        .map(|(t, v)| {
            let x = 4.0 + (t - first) as f64 / span_t * (WIDTH - 8.0);
            let y = HEIGHT - 14.0 - (v - lo) / span_v * (HEIGHT - 28.0);
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let latest = points.last().map_or(0.0, |p| p.1);
    html! {
        figure {
            svg.chart xmlns="http://www.w3.org/2000/svg" width="100%" viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-label=(series.name) {
                rect.frame x="0" y="0" width=(WIDTH) height=(HEIGHT) {}
                @if !xy.is_empty() { polyline points=(xy.join(" ")) {} }
                text x="4" y="11" { "max " (fmt(hi)) }
                text x="4" y=(HEIGHT - 3.0) { "min " (fmt(lo)) }
                text x=(WIDTH - 90.0) y="11" { "now " (fmt(latest)) }
            }
            figcaption { (series.name) }
        }
    }
}

fn fmt(v: f64) -> String {
    if !v.is_finite() {
        "—".to_owned()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_draws_one_point_per_present_sample() {
        let series = Series {
            name: format!("{}{{q=\"<a>\"}}", "dw_workflow_runs_total"),
            values: vec![Some(1.0), None, Some(3.0)],
        };
        let svg = line(&series, &[0, 5_000, 10_000]).into_string();
        assert!(svg.contains("points=\"4.0,76.0 316.0,14.0\""), "{svg}");
        assert!(svg.contains("_total{q=&quot;&lt;a&gt;&quot;}"), "{svg}");
        assert!(svg.contains("now 3"));
    }
}
