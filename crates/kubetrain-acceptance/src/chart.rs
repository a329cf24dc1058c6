//! Inline SVG charts for the HTML report: line charts (linear, log-10 or size axes, event markers) and
//! horizontal bar charts. Every chart fills the content width (`viewBox`, `width="100%"`), has round
//! ticks ([`crate::ticks`]), a legend that tells its series apart by color, dash and marker, and
//! margins computed from its longest labels so that none is cut.

use std::fmt::Write as _;

use crate::ticks::{self, Ticks};
use crate::units;

/// Width of every chart in its own units; the page scales it to the content width.
const W: f64 = 960.0;
/// Height of a line chart.
const H: f64 = 340.0;
/// Font size of labels and of the average glyph's width (generous, so estimates err on the safe side).
const FONT: f64 = 13.0;
const CHAR_W: f64 = 7.6;
/// Longest bar label before it is abbreviated (the whole label stays in its tooltip).
const MAX_LABEL: usize = 34;

/// Color, dash pattern and marker of the `i`th series.
const STYLES: [(&str, &str, Mark); 3] = [
    ("#1f77b4", "", Mark::Circle),
    ("#d62728", "8 5", Mark::Square),
    ("#2ca02c", "2 3", Mark::Diamond),
];

#[derive(Clone, Copy)]
enum Mark {
    Circle,
    Square,
    Diamond,
}

impl Mark {
    fn svg(self, x: f64, y: f64, color: &str) -> String {
        match self {
            Mark::Circle => format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{color}"/>"#),
            Mark::Square => format!(
                r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="none" stroke="{color}" stroke-width="1.5"/>"#,
                x - 3.5,
                y - 3.5
            ),
            Mark::Diamond => format!(
                r#"<path d="M{x:.1},{:.1} l4,4 l-4,4 l-4,-4 z" fill="{color}"/>"#,
                y - 4.0
            ),
        }
    }
}

/// How an axis maps its values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scale {
    /// Linear, from the data's low end.
    Linear,
    /// Linear, from 0 (rates and bandwidths: the height is the value).
    FromZero,
    /// Log 10 over the data's range (values ≤ 0 are left out).
    Log10,
    /// Log 2 with byte-size ticks (message sizes).
    Bytes,
}

/// An axis: its title (with the unit, and `log scale` where it is one) and its scale.
pub(crate) struct Axis<'a> {
    pub(crate) title: &'a str,
    pub(crate) scale: Scale,
}

/// A vertical line at `x` on a line chart: an event of kind `kind` (its legend entry).
pub(crate) struct Marker {
    pub(crate) x: f64,
    pub(crate) kind: &'static str,
    pub(crate) color: &'static str,
    pub(crate) label: String,
}

/// A line chart's content.
pub(crate) struct LineChart<'a> {
    pub(crate) id: &'a str,
    pub(crate) title: &'a str,
    pub(crate) x: Axis<'a>,
    pub(crate) y: Axis<'a>,
    pub(crate) series: Vec<(&'a str, Vec<(f64, f64)>)>,
    pub(crate) markers: Vec<Marker>,
}

/// `&`, `<`, `>` and `"` escaped for HTML text and attributes.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The estimated drawn width of `s`.
fn text_w(s: &str) -> f64 {
    s.chars().count() as f64 * CHAR_W
}

/// `s` cut to `max` characters with `…`.
fn abbreviate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let head: String = s.chars().take(max - 1).collect();
        format!("{}…", head.trim_end())
    }
}

/// The opening tag, tooltip and heading of a chart `h` high.
fn open(id: &str, title: &str, h: f64) -> String {
    format!(
        r#"<svg class="chart" id="{id}" viewBox="0 0 {W} {h}" width="100%" preserveAspectRatio="xMidYMin meet" role="img" aria-label="{t}" font-size="{FONT}"><title>{t}</title><text x="{}" y="20" text-anchor="middle" font-weight="bold" font-size="15">{t}</text>"#,
        W / 2.0,
        t = esc(title)
    )
}

/// Ticks for values `lo..=hi` on `scale`.
fn ticks_for(scale: Scale, lo: f64, hi: f64, max: usize) -> Ticks {
    match scale {
        Scale::Linear => ticks::linear(lo, hi, max),
        Scale::FromZero => ticks::linear(lo.min(0.0), hi, max),
        Scale::Log10 => ticks::log10(lo, hi, max),
        Scale::Bytes => ticks::log2(lo, hi, max),
    }
}

/// A value on `scale` as a fraction of `t`'s range.
fn frac(scale: Scale, t: &Ticks, v: f64) -> f64 {
    let f = |v: f64| match scale {
        Scale::Linear | Scale::FromZero => v,
        Scale::Log10 => v.log10(),
        Scale::Bytes => v.log2(),
    };
    (f(v) - f(t.lo)) / (f(t.hi) - f(t.lo))
}

/// The label of tick `v` on `scale`.
fn tick_label(scale: Scale, t: &Ticks, v: f64) -> String {
    if scale == Scale::Bytes {
        units::bytes(v as u64)
    } else {
        t.label(v)
    }
}

/// The plotted area and the axes' ticks.
struct Plot {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    x: (Scale, Ticks),
    y: (Scale, Ticks),
}

impl Plot {
    fn px(&self, v: f64) -> f64 {
        self.left + frac(self.x.0, &self.x.1, v) * (self.right - self.left)
    }

    fn py(&self, v: f64) -> f64 {
        self.bottom - frac(self.y.0, &self.y.1, v) * (self.bottom - self.top)
    }

    /// Grid, axes, tick labels and axis titles.
    fn axes(&self, svg: &mut String, x_title: &str, y_title: &str) {
        let (l, r, t, b) = (self.left, self.right, self.top, self.bottom);
        for v in &self.y.1.values {
            let y = self.py(*v);
            let _ = write!(
                svg,
                r##"<line x1="{l}" x2="{r}" y1="{y:.1}" y2="{y:.1}" stroke="#e6e6e6"/><text class="tick" x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                l - 6.0,
                y + 4.5,
                tick_label(self.y.0, &self.y.1, *v)
            );
        }
        for v in &self.x.1.values {
            let x = self.px(*v);
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{b}" y2="{}" stroke="#444"/><text class="tick" x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
                b + 5.0,
                b + 20.0,
                tick_label(self.x.0, &self.x.1, *v)
            );
        }
        let mid_y = (t + b) / 2.0;
        let _ = write!(
            svg,
            r##"<line x1="{l}" y1="{b}" x2="{r}" y2="{b}" stroke="#444"/><line x1="{l}" y1="{t}" x2="{l}" y2="{b}" stroke="#444"/><text class="axis-title" x="{}" y="{}" text-anchor="middle">{}</text><text class="axis-title" x="18" y="{mid_y}" transform="rotate(-90 18 {mid_y})" text-anchor="middle">{}</text>"##,
            (l + r) / 2.0,
            b + 40.0,
            esc(x_title),
            esc(y_title)
        );
    }
}

/// Legend entries laid out in rows from `left` within `right`: returns the SVG and the rows' count.
fn legend(entries: &[(String, &str, &str, Option<Mark>)], left: f64, right: f64) -> (String, u32) {
    let mut svg = String::new();
    let (mut x, mut row) = (left, 0u32);
    for (name, color, dash, mark) in entries {
        let w = 34.0 + text_w(name) + 22.0;
        if x + w > right && x > left {
            (x, row) = (left, row + 1);
        }
        let y = 40.0 + 20.0 * f64::from(row);
        let _ = write!(
            svg,
            r#"<line x1="{x}" x2="{}" y1="{}" y2="{}" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>{}<text class="legend" x="{}" y="{}">{}</text>"#,
            x + 28.0,
            y - 4.0,
            y - 4.0,
            mark.map_or(String::new(), |m| m.svg(x + 14.0, y - 4.0, color)),
            x + 34.0,
            y,
            esc(name)
        );
        x += w;
    }
    (svg, row + 1)
}

/// The legend of `chart`: one entry per series, then one per kind of marker.
fn legend_entries<'a>(chart: &'a LineChart<'_>) -> Vec<(String, &'a str, &'a str, Option<Mark>)> {
    let mut entries: Vec<(String, &str, &str, Option<Mark>)> = chart
        .series
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let (color, dash, mark) = STYLES[i % STYLES.len()];
            (name.to_string(), color, dash, Some(mark))
        })
        .collect();
    for m in &chart.markers {
        if !entries.iter().any(|e| e.0 == m.kind) {
            entries.push((m.kind.to_string(), m.color, "4 3", None));
        }
    }
    entries
}

/// A line chart; "no data" when no series has a point that its axes can show.
pub(crate) fn line_chart(chart: &LineChart<'_>) -> String {
    let keep =
        |s: Scale, v: f64| v.is_finite() && (!matches!(s, Scale::Log10 | Scale::Bytes) || v > 0.0);
    let series: Vec<(&str, Vec<(f64, f64)>)> = chart
        .series
        .iter()
        .map(|(n, p)| {
            let p = p
                .iter()
                .copied()
                .filter(|&(x, y)| keep(chart.x.scale, x) && keep(chart.y.scale, y));
            (*n, p.collect())
        })
        .collect();
    let xs = series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .collect();
    let (legend_svg, rows) = legend(&legend_entries(chart), 70.0, W - 20.0);
    let mut svg = open(chart.id, chart.title, H);
    if ys.is_empty() {
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">no data</text></svg>"#,
            W / 2.0,
            H / 2.0
        );
        return svg;
    }
    let marker_xs = chart
        .markers
        .iter()
        .map(|m| m.x)
        .filter(|x| keep(chart.x.scale, *x));
    let all_x: Vec<f64> = xs.chain(marker_xs).collect();
    let range = |v: &[f64]| {
        v.iter()
            .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)))
    };
    let ((x0, x1), (y0, y1)) = (range(&all_x), range(&ys));
    let xt = ticks_for(chart.x.scale, x0, x1, 11);
    // A log axis shows every decade up to 9 of them: a loss falling by orders of magnitude reads best so.
    let y_ticks = if chart.y.scale == Scale::Log10 { 9 } else { 7 };
    let yt = ticks_for(chart.y.scale, y0, y1, y_ticks);
    let widest = |s: Scale, t: &Ticks| {
        t.values
            .iter()
            .map(|v| text_w(&tick_label(s, t, *v)))
            .fold(0.0, f64::max)
    };
    let last_x = xt
        .values
        .last()
        .map_or(0.0, |v| text_w(&tick_label(chart.x.scale, &xt, *v)));
    let plot = Plot {
        left: 36.0 + widest(chart.y.scale, &yt),
        right: W - 12.0 - last_x / 2.0,
        top: 40.0 + 20.0 * f64::from(rows),
        bottom: H - 52.0,
        x: (chart.x.scale, xt),
        y: (chart.y.scale, yt),
    };
    svg.push_str(&legend_svg);
    plot.axes(&mut svg, chart.x.title, chart.y.title);
    for m in chart.markers.iter().filter(|m| keep(chart.x.scale, m.x)) {
        let x = plot.px(m.x);
        let _ = write!(
            svg,
            r#"<line class="marker" x1="{x:.1}" x2="{x:.1}" y1="{}" y2="{}" stroke="{}" stroke-dasharray="4 3"><title>{}</title></line>"#,
            plot.top,
            plot.bottom,
            m.color,
            esc(&m.label)
        );
    }
    for (i, (name, points)) in series.iter().enumerate() {
        series_svg(&mut svg, &plot, i, name, points);
    }
    svg.push_str("</svg>");
    svg
}

/// One series: its line in its dash, and its marks (all of them up to 60 points, else every nth).
fn series_svg(svg: &mut String, plot: &Plot, i: usize, name: &str, points: &[(f64, f64)]) {
    if points.is_empty() {
        return;
    }
    let (color, dash, mark) = STYLES[i % STYLES.len()];
    let d: Vec<String> = points
        .iter()
        .enumerate()
        .map(|(j, (x, y))| {
            format!(
                "{}{:.1},{:.1}",
                if j == 0 { "M" } else { "L" },
                plot.px(*x),
                plot.py(*y)
            )
        })
        .collect();
    let _ = write!(
        svg,
        r#"<path class="series" d="{}" fill="none" stroke="{color}" stroke-width="{}" stroke-dasharray="{dash}"><title>{}</title></path>"#,
        d.join(" "),
        if i == 0 { 3.0 } else { 1.8 },
        esc(name)
    );
    let every = points.len().div_ceil(60);
    for (x, y) in points.iter().step_by(every) {
        svg.push_str(&mark.svg(plot.px(*x), plot.py(*y), color));
    }
}

/// One bar: its label, its value and its color.
pub(crate) struct Bar {
    pub(crate) label: String,
    pub(crate) value: f64,
    pub(crate) color: &'static str,
}

/// A horizontal bar chart from 0, its values written by `value` after each bar and its ticks titled
/// `axis_title`. Labels over 34 characters are abbreviated (the whole label is the bar's tooltip).
pub(crate) fn bar_chart(
    id: &str,
    title: &str,
    axis_title: &str,
    bars: &[Bar],
    value: &dyn Fn(f64) -> String,
) -> String {
    let h = 44.0 + 30.0 * bars.len().max(1) as f64 + 52.0;
    let mut svg = open(id, title, h);
    let labels: Vec<String> = bars
        .iter()
        .map(|b| abbreviate(&b.label, MAX_LABEL))
        .collect();
    let values: Vec<String> = bars.iter().map(|b| value(b.value)).collect();
    let max = bars
        .iter()
        .map(|b| b.value)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let t = ticks::linear(0.0, max, 6);
    let left = 16.0 + labels.iter().map(|l| text_w(l)).fold(40.0, f64::max);
    let right = W - 16.0 - values.iter().map(|v| text_w(v)).fold(0.0, f64::max) - 8.0;
    let right = right.max(left + 100.0);
    let x = |v: f64| left + (v - t.lo) / (t.hi - t.lo) * (right - left);
    let bottom = h - 52.0;
    for v in &t.values {
        let _ = write!(
            svg,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="40" y2="{bottom}" stroke="#e6e6e6"/><text class="tick" x="{0:.1}" y="{1}" text-anchor="middle">{2}</text>"##,
            x(*v),
            bottom + 18.0,
            t.label(*v)
        );
    }
    let _ = write!(
        svg,
        r##"<line x1="{left}" x2="{left}" y1="40" y2="{bottom}" stroke="#444"/><text class="axis-title" x="{}" y="{}" text-anchor="middle">{}</text>"##,
        (left + right) / 2.0,
        bottom + 40.0,
        esc(axis_title)
    );
    for (i, (bar, (label, shown))) in bars.iter().zip(labels.iter().zip(&values)).enumerate() {
        let y = 48.0 + 30.0 * i as f64;
        let v = if bar.value.is_finite() {
            bar.value.max(0.0)
        } else {
            0.0
        };
        let w = (x(v) - left).max(1.0);
        let _ = write!(
            svg,
            r#"<text class="bar-label" x="{}" y="{}" text-anchor="end">{}</text><rect class="bar" x="{left}" y="{y}" width="{w:.1}" height="20" fill="{}"><title>{}: {}</title></rect><text class="bar-value" x="{:.1}" y="{}">{}</text>"#,
            left - 8.0,
            y + 15.0,
            esc(label),
            bar.color,
            esc(&bar.label),
            esc(shown),
            left + w + 6.0,
            y + 15.0,
            esc(shown)
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                t.split_once('>')
                    .and_then(|(_, r)| r.split_once("</text>"))
                    .map(|(s, _)| s.to_string())
            })
            .collect()
    }

    #[test]
    fn a_line_chart_is_full_width_with_round_ticks_and_a_legend() {
        let chart = LineChart {
            id: "c",
            title: "bandwidth",
            x: Axis {
                title: "message size",
                scale: Scale::Bytes,
            },
            y: Axis {
                title: "GB/s",
                scale: Scale::FromZero,
            },
            series: vec![
                (
                    "busbw",
                    vec![(8.0, 0.009), (1024.0, 0.43), (4_194_304.0, 0.712)],
                ),
                (
                    "algbw",
                    vec![(8.0, 0.009), (1024.0, 0.43), (4_194_304.0, 0.712)],
                ),
            ],
            markers: vec![],
        };
        let svg = line_chart(&chart);
        assert!(
            svg.contains(r#"viewBox="0 0 960 340" width="100%""#),
            "{svg}"
        );
        let t = texts(&svg);
        for want in [
            "16 B",
            "1 KiB",
            "4 MiB",
            "0.0",
            "0.2",
            "0.8",
            "busbw",
            "algbw",
            "message size",
            "GB/s",
        ] {
            assert!(t.iter().any(|s| s == want), "{want} in {t:?}");
        }
        // The two series differ in dash and marker, so equal values stay distinguishable.
        assert!(
            svg.contains(r#"stroke-dasharray="8 5""#) && svg.contains("<rect"),
            "{svg}"
        );
        assert_eq!(svg.matches(r#"class="series""#).count(), 2);
    }

    #[test]
    fn a_log_chart_spans_the_data_and_leaves_out_what_it_cannot_show() {
        let chart = LineChart {
            id: "loss",
            title: "Loss",
            x: Axis {
                title: "seconds",
                scale: Scale::Linear,
            },
            y: Axis {
                title: "loss (log scale)",
                scale: Scale::Log10,
            },
            series: vec![(
                "loss",
                vec![(0.1, 38.0), (0.5, 0.0), (1.0, 3.4e-5), (15.4, 3.4e-5)],
            )],
            markers: vec![Marker {
                x: 3.4,
                kind: "pod deletion",
                color: "#d62728",
                label: "pod x".into(),
            }],
        };
        let svg = line_chart(&chart);
        let t = texts(&svg);
        for want in ["0.00001", "100", "0", "16", "pod deletion"] {
            assert!(t.iter().any(|s| s == want), "{want} in {t:?}");
        }
        assert!(
            !t.iter()
                .any(|s| s.contains('e') && s.chars().any(|c| c.is_ascii_digit())),
            "{t:?}"
        );
        let empty = LineChart {
            series: vec![("loss", vec![(1.0, 0.0)])],
            ..chart
        };
        assert!(line_chart(&empty).contains("no data"));
    }

    #[test]
    fn a_bar_chart_abbreviates_long_labels_and_keeps_them_whole_in_the_tooltip() {
        let long = "baseline: rented CPU VM at 0.10 USD/h in a region far away";
        let bars = [
            Bar {
                label: long.into(),
                value: 0.05,
                color: "#2ca02c",
            },
            Bar {
                label: "effective".into(),
                value: f64::INFINITY,
                color: "#1f77b4",
            },
        ];
        let svg = bar_chart("b", "Cost per unit", "USD per unit", &bars, &|v| {
            units::money(v, "USD")
        });
        let t = texts(&svg);
        assert!(
            t.iter().any(|s| s == "baseline: rented CPU VM at 0.10 U…"),
            "{t:?}"
        );
        assert!(
            svg.contains(&format!("<title>{long}: $0.05</title>")),
            "{svg}"
        );
        assert!(
            t.iter().any(|s| s == "—"),
            "infinite shown as a dash: {t:?}"
        );
        assert!(
            t.iter().any(|s| s == "0.05") && t.iter().any(|s| s == "0.00"),
            "ticks: {t:?}"
        );
        assert!(svg.contains(r#"width="100%""#));
    }
}
