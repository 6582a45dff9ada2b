//! `latency.svg`: the picture a person reads at a glance, in any browser.
//! Top: latency by percentile, one curve per series, both axes log scale
//! (the usual HdrHistogram plot: the tail is where stuck calls show).
//! Bottom: calls per second per interval, intervals with errors marked.

use std::fmt::Write as _;

use crate::export::RunInfo;
use crate::latency::LatencyBook;
use crate::words::latency_whole_units;

const WIDTH: f64 = 960.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 330.0;
const CURVES_TOP: f64 = 50.0;
const CURVES_HEIGHT: f64 = 330.0;
const TIMELINE_TOP: f64 = 450.0;
const TIMELINE_HEIGHT: f64 = 150.0;
const HEIGHT: f64 = 650.0;
/// x = log10(1 / (1 - q)): 0 is p0, 1 is p90, ... 5 is p99.999.
const MAX_NINES: f64 = 5.0;
const PALETTE: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const PLOT_WIDTH: f64 = WIDTH - LEFT - RIGHT;

/// The picture of `book` for `run`: the title, the percentile curves with
/// their axes and legend, the timeline.
pub fn render(book: &LatencyBook, run: &RunInfo) -> String {
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    title(&mut svg, run);
    let scale = Scale::of(book);
    curve_axes(&mut svg, &scale);
    curves(&mut svg, book, &scale);
    timeline(&mut svg, book);
    svg.push_str("</svg>\n");
    svg
}

fn title(svg: &mut String, run: &RunInfo) {
    let scope = if run.pods.is_empty() {
        "whole node".to_string()
    } else {
        run.pods.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
    };
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="24" font-size="15" font-weight="bold">podstuck: call latency by percentile, {} ({}, {:.0} s, {} events, {} lost)</text>"#,
        escape(&scope),
        escape(&run.node),
        run.duration_s,
        run.events_seen,
        run.events_lost
    );
}

/// Where the curves go: latency on a log scale over whole decades (y), the
/// percentile as nines (x).
struct Scale {
    decade_low: f64,
    decade_high: f64,
}

impl Scale {
    /// The latency range over every series, in decades.
    fn of(book: &LatencyBook) -> Scale {
        let (mut low, mut high) = (f64::MAX, 1.0f64);
        for (_, series) in book.series() {
            low = low.min(series.total.min().max(1) as f64);
            high = high.max(series.total.max().max(1) as f64);
        }
        if low > high {
            low = 1.0;
        }
        Scale { decade_low: low.log10().floor(), decade_high: (high.log10().ceil()).max(low.log10().floor() + 1.0) }
    }

    fn y_of(&self, ns: f64) -> f64 {
        let fraction = (ns.max(1.0).log10() - self.decade_low) / (self.decade_high - self.decade_low);
        CURVES_TOP + CURVES_HEIGHT * (1.0 - fraction)
    }

    fn x_of(&self, nines: f64) -> f64 {
        LEFT + PLOT_WIDTH * nines / MAX_NINES
    }
}

/// The curves' frame, grid and axis marks.
fn curve_axes(svg: &mut String, scale: &Scale) {
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{CURVES_TOP}" width="{PLOT_WIDTH}" height="{CURVES_HEIGHT}" fill="none" stroke="#444"/>"##
    );
    for (nines, name) in [(0.0, "0%"), (1.0, "90%"), (2.0, "99%"), (3.0, "99.9%"), (4.0, "99.99%"), (5.0, "99.999%")] {
        let x = scale.x_of(nines);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{CURVES_TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{name}</text>"##,
            CURVES_TOP + CURVES_HEIGHT,
            CURVES_TOP + CURVES_HEIGHT + 16.0
        );
    }
    let mut decade = scale.decade_low;
    while decade <= scale.decade_high {
        let y = scale.y_of(10f64.powf(decade));
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + PLOT_WIDTH,
            LEFT - 6.0,
            y + 4.0,
            latency_whole_units(10f64.powf(decade))
        );
        decade += 1.0;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile</text>"#,
        LEFT + PLOT_WIDTH / 2.0,
        CURVES_TOP + CURVES_HEIGHT + 34.0
    );
}

/// One curve per series, and its legend entry.
fn curves(svg: &mut String, book: &LatencyBook, scale: &Scale) {
    for (i, (key, series)) in book.series().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let mut points = String::new();
        let steps = 100;
        for step in 0..=steps {
            let nines = MAX_NINES * step as f64 / steps as f64;
            let quantile = 1.0 - 10f64.powf(-nines);
            let value = series.total.value_at_quantile(quantile) as f64;
            let _ = write!(points, "{:.1},{:.1} ", scale.x_of(nines), scale.y_of(value));
        }
        let tag = escape(&key.tag());
        let _ = writeln!(
            svg,
            r#"<polyline class="curve" data-series="{tag}" fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.trim_end()
        );
        let y = CURVES_TOP + 10.0 + i as f64 * 18.0;
        let x = LEFT + PLOT_WIDTH + 16.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.1}" y="{:.1}" width="12" height="4" fill="{color}"/><text x="{:.1}" y="{:.1}">{tag} ({} calls)</text>"#,
            y - 4.0,
            x + 18.0,
            y + 1.0,
            series.count
        );
    }
}

/// Timeline: calls per second per interval; red dots where calls failed.
fn timeline(svg: &mut String, book: &LatencyBook) {
    let timeline = book.timeline();
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{TIMELINE_TOP}" width="{PLOT_WIDTH}" height="{TIMELINE_HEIGHT}" fill="none" stroke="#444"/><text x="{LEFT}" y="{:.1}" font-weight="bold">calls per second (red: intervals with failed calls, label = failures)</text>"##,
        TIMELINE_TOP - 10.0
    );
    let end = timeline.last().map(|t| (t.start + t.length).as_secs_f64()).unwrap_or(1.0).max(1e-3);
    let rate = |t: &crate::latency::IntervalTotals| t.calls as f64 / t.length.as_secs_f64().max(1e-3);
    let peak = timeline.iter().map(rate).fold(1.0f64, f64::max);
    let tx = |secs: f64| LEFT + PLOT_WIDTH * secs / end;
    let ty = |r: f64| TIMELINE_TOP + TIMELINE_HEIGHT * (1.0 - r / peak);
    let mut points = String::new();
    for t in timeline {
        let mid = (t.start + t.length / 2).as_secs_f64();
        let _ = write!(points, "{:.1},{:.1} ", tx(mid), ty(rate(t)));
    }
    let _ = writeln!(
        svg,
        r##"<polyline class="timeline" fill="none" stroke="#333" stroke-width="1.5" points="{}"/>"##,
        points.trim_end()
    );
    for t in timeline.iter().filter(|t| t.errors > 0) {
        let mid = (t.start + t.length / 2).as_secs_f64();
        let _ = writeln!(
            svg,
            r##"<circle class="errors" cx="{:.1}" cy="{:.1}" r="4" fill="#d62728"/><text x="{:.1}" y="{:.1}" fill="#d62728" font-size="10">{}</text>"##,
            tx(mid),
            ty(rate(t)),
            tx(mid) + 5.0,
            ty(rate(t)) - 5.0,
            t.errors
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}/s</text><text x="{:.1}" y="{:.1}" text-anchor="end">0</text><text x="{:.1}" y="{:.1}" text-anchor="end">{:.0} s</text>"#,
        LEFT - 6.0,
        TIMELINE_TOP + 4.0,
        peak,
        LEFT - 6.0,
        TIMELINE_TOP + TIMELINE_HEIGHT,
        LEFT + PLOT_WIDTH,
        TIMELINE_TOP + TIMELINE_HEIGHT + 16.0,
        end
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::summary::tests::run_info;
    use crate::identify::actor::Role;
    use crate::latency::tests::{event, identity};
    use podstuck_common::Syscall;
    use std::time::{Duration, SystemTime};

    #[test]
    fn one_curve_per_series_and_a_timeline() {
        let t0 = SystemTime::now();
        let mut book = LatencyBook::new(t0);
        for i in 1..200u64 {
            book.record(&event(Syscall::Unlinkat, 0, i * 100), &identity(Role::Runtime, None));
        }
        book.record(&event(Syscall::Rmdir, -16, 20_000), &identity(Role::Kubelet, None));
        book.close_interval(t0 + Duration::from_secs(5));
        book.record(&event(Syscall::Unlinkat, 0, 50), &identity(Role::Runtime, None));
        book.close_interval(t0 + Duration::from_secs(10));
        let svg = render(&book, &run_info());
        assert_eq!(svg.matches("class=\"curve\"").count(), 2);
        assert!(svg.contains("data-series=\"rmdir/EBUSY/kubelet/node\""));
        assert_eq!(svg.matches("class=\"timeline\"").count(), 1);
        assert_eq!(svg.matches("class=\"errors\"").count(), 1);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn an_empty_run_still_draws() {
        let svg = render(&LatencyBook::new(SystemTime::now()), &run_info());
        assert_eq!(svg.matches("class=\"curve\"").count(), 0);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
