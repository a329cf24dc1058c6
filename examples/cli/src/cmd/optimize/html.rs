//! `optimization.html`: the trials table, the objective over the trials, and each parameter against the
//! objective, as inline SVG. No script, nothing loaded from elsewhere.

use std::fmt::Write as _;

use kubetrain_client::optimize::{OptimizationReport, TrialReport};

const W: f64 = 960.0;
const H: f64 = 300.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 46.0;
const BLUE: &str = "#1f77b4";
const GREEN: &str = "#2ca02c";
const GREY: &str = "#999999";
const RED: &str = "#d62728";

/// HTML-escapes text.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A number as a short label.
fn num(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e5).contains(&a) {
        format!("{v:.3e}")
    } else {
        format!("{}", (v * 1e4).round() / 1e4)
    }
}

/// The self-contained page.
pub(super) fn render(report: &OptimizationReport) -> String {
    let mut out = String::new();
    head(&mut out, report);
    out.push_str("<h2>Objective over trials</h2>\n");
    out.push_str(&objective_chart(report));
    let names: Vec<&String> = report
        .trials
        .first()
        .map(|t| t.parameters.keys().collect())
        .unwrap_or_default();
    if !names.is_empty() {
        out.push_str("<h2>Parameters against the objective</h2>\n");
    }
    for name in names {
        out.push_str(&parameter_chart(report, name));
    }
    trials_table(&mut out, report);
    out.push_str("</body></html>\n");
    out
}

fn head(out: &mut String, report: &OptimizationReport) {
    let best = match &report.best {
        Some(b) => {
            let params: Vec<String> = b
                .parameters
                .iter()
                .map(|(k, v)| format!("<code>{}={}</code>", esc(k), esc(v)))
                .collect();
            format!(
                r#"Best: <b id="best">{}</b>, {} = <b>{}</b> with {}."#,
                esc(&b.name),
                esc(&report.metric),
                num(b.objective),
                params.join(" ")
            )
        }
        None => format!(
            r#"<span id="best" class="fail">No trial succeeded with a {} value.</span>"#,
            esc(&report.metric)
        ),
    };
    let _ = write!(
        out,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>kubetrain optimize: {name}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 70em; color: #222 }}
table {{ border-collapse: collapse; margin: 1em 0; width: 100% }} td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top }}
td.num, th.num {{ text-align: right; font-variant-numeric: tabular-nums }}
tr.best td {{ background: #e8f5e9; font-weight: bold }} .fail {{ color: #cf222e; font-weight: bold }}
svg.chart {{ display: block; width: 100%; height: auto; margin: 1em 0; background: #fcfcfc; border: 1px solid #eee; box-sizing: border-box }}
code {{ background: #f4f4f4; padding: 0 3px; overflow-wrap: anywhere }}
</style></head><body>
<h1>Optimization: <code>{name}</code></h1>
<p>{n} trials, {algorithm} search, {direction} <code>{metric}</code>. {best}</p>
"#,
        name = esc(&report.name),
        n = report.trials.len(),
        algorithm = esc(&report.algorithm),
        direction = esc(&report.direction.to_lowercase()),
        metric = esc(&report.metric),
    );
}

fn trials_table(out: &mut String, report: &OptimizationReport) {
    let names: Vec<&String> = report
        .trials
        .first()
        .map(|t| t.parameters.keys().collect())
        .unwrap_or_default();
    out.push_str("<h2>Trials</h2>\n<table id=\"trials\"><tr><th class=\"num\">#</th><th>trial</th><th>state</th>");
    for n in &names {
        let _ = write!(out, "<th>{}</th>", esc(n));
    }
    let _ = writeln!(
        out,
        "<th class=\"num\">{}</th><th>note</th></tr>",
        esc(&report.metric)
    );
    let best = report.best.as_ref().map(|b| b.name.as_str());
    for t in &report.trials {
        let class = if Some(t.name.as_str()) == best {
            " class=\"best\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr{class}><td class=\"num\">{}</td><td>{}</td><td>{}</td>",
            t.index,
            esc(&t.name),
            esc(&t.state)
        );
        for n in &names {
            let _ = write!(
                out,
                "<td>{}</td>",
                esc(t.parameters.get(*n).map_or("", String::as_str))
            );
        }
        let objective = t.objective.map(num).unwrap_or_default();
        let note = esc(t.message.as_deref().unwrap_or(""));
        let _ = writeln!(
            out,
            "<td class=\"num\">{objective}</td><td>{note}</td></tr>"
        );
    }
    out.push_str("</table>\n");
}

/// An axis: the range and whether it is logarithmic.
#[derive(Clone, Copy)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    fn of(values: &[f64], log_if_wide: bool) -> Self {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() {
            return Self {
                lo: 0.0,
                hi: 1.0,
                log: false,
            };
        }
        let log = log_if_wide && lo > 0.0 && hi / lo >= 20.0;
        let (lo, hi) = if log {
            (lo.log10().floor(), hi.log10().ceil())
        } else {
            (lo, hi)
        };
        let (lo, hi) = if hi - lo < 1e-12 {
            (lo - 0.5 * lo.abs().max(1.0), hi + 0.5 * hi.abs().max(1.0))
        } else {
            (lo, hi)
        };
        let pad = if log { 0.0 } else { 0.05 * (hi - lo) };
        Self {
            lo: lo - pad,
            hi: hi + pad,
            log,
        }
    }

    fn frac(&self, v: f64) -> f64 {
        let v = if self.log { v.log10() } else { v };
        ((v - self.lo) / (self.hi - self.lo)).clamp(0.0, 1.0)
    }

    fn ticks(&self) -> Vec<(f64, String)> {
        if self.log {
            #[allow(clippy::cast_possible_truncation, reason = "decades of an f64")]
            let (a, b) = (self.lo.ceil() as i32, self.hi.floor() as i32);
            return (a..=b).map(|e| (10f64.powi(e), format!("1e{e}"))).collect();
        }
        let raw = (self.hi - self.lo) / 5.0;
        let mag = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|s| *s >= raw)
            .unwrap_or(raw);
        let mut v = (self.lo / step).ceil() * step;
        let mut out = Vec::new();
        while v <= self.hi + 1e-9 * step && out.len() < 12 {
            out.push((v, num(v)));
            v += step;
        }
        out
    }
}

fn px(axis: &Axis, v: f64) -> f64 {
    LEFT + axis.frac(v) * (W - LEFT - RIGHT)
}

fn py(axis: &Axis, v: f64) -> f64 {
    H - BOTTOM - axis.frac(v) * (H - TOP - BOTTOM)
}

/// The frame: title, axes, ticks and labels.
fn frame(id: &str, title: &str, x: &Axis, y: &Axis, x_label: &str, y_label: &str) -> String {
    let mut svg = format!(
        r#"<svg class="chart" id="{id}" viewBox="0 0 {W} {H}" role="img" aria-label="{t}" font-family="system-ui, sans-serif" font-size="13">
<text x="{LEFT}" y="20" font-weight="bold">{t}</text>
"#,
        t = esc(title)
    );
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, TOP, H - BOTTOM);
    let _ = writeln!(
        svg,
        r##"<rect x="{x0}" y="{y0}" width="{}" height="{}" fill="none" stroke="#ccc"/>"##,
        x1 - x0,
        y1 - y0
    );
    for (v, label) in y.ticks() {
        let yy = py(y, v);
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" x2="{x1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            yy + 4.0,
            esc(&label)
        );
    }
    for (v, label) in x.ticks() {
        let xx = px(x, v);
        let _ = writeln!(
            svg,
            r#"<text x="{xx:.1}" y="{}" text-anchor="middle">{}</text>"#,
            y1 + 18.0,
            esc(&label)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        H - 6.0,
        esc(x_label)
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (y0 + y1) / 2.0,
        esc(y_label)
    );
    svg
}

fn colour(t: &TrialReport, best: Option<&str>) -> &'static str {
    if Some(t.name.as_str()) == best {
        GREEN
    } else if t.state == "Succeeded" {
        BLUE
    } else if t.state == "Stopped" {
        GREY
    } else {
        RED
    }
}

/// The value a trial is drawn at: its objective, or for a stopped trial the last value it reported.
fn shown(t: &TrialReport) -> Option<f64> {
    let stopped = || {
        (t.state == "Stopped")
            .then(|| t.intermediate.iter().rev().copied().find(|v| v.is_finite()))
            .flatten()
    };
    t.objective.filter(|v| v.is_finite()).or_else(stopped)
}

fn objective_chart(report: &OptimizationReport) -> String {
    let scored: Vec<&TrialReport> = report
        .trials
        .iter()
        .filter(|t| shown(t).is_some())
        .collect();
    let values: Vec<f64> = scored.iter().filter_map(|t| shown(t)).collect();
    let y = Axis::of(&values, true);
    let indices: Vec<f64> = report.trials.iter().map(|t| f64::from(t.index)).collect();
    let x = Axis::of(&indices, false);
    let mut svg = frame(
        "chart-objective",
        "Objective of each trial (stopped ones: their last report), and the best so far",
        &x,
        &y,
        "trial",
        &report.metric,
    );
    let best = report.best.as_ref().map(|b| b.name.as_str());
    // The best so far among succeeded trials, as a step line.
    let maximise = report.direction == "Maximize";
    let mut path = String::new();
    let mut so_far: Option<f64> = None;
    for t in scored.iter().filter(|t| t.state == "Succeeded") {
        let v = t.objective.unwrap_or_default();
        let better = so_far.is_none_or(|b| if maximise { v > b } else { v < b });
        let (xx, prev) = (px(&x, f64::from(t.index)), so_far);
        if better {
            so_far = Some(v);
        }
        let yy = py(&y, so_far.unwrap_or(v));
        match prev {
            None => {
                let _ = write!(path, "M{xx:.1},{yy:.1}");
            }
            Some(p) => {
                let _ = write!(path, " L{xx:.1},{:.1} L{xx:.1},{yy:.1}", py(&y, p));
            }
        }
    }
    if !path.is_empty() {
        let _ = writeln!(
            svg,
            r#"<path class="series" d="{path}" fill="none" stroke="{GREEN}" stroke-width="2"/>"#
        );
    }
    for t in &scored {
        let v = shown(t).unwrap_or_default();
        let _ = writeln!(
            svg,
            r#"<circle class="point" cx="{:.1}" cy="{:.1}" r="5" fill="{}"><title>{} ({}): {}</title></circle>"#,
            px(&x, f64::from(t.index)),
            py(&y, v),
            colour(t, best),
            esc(&t.name),
            esc(&t.state),
            num(v)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn parameter_chart(report: &OptimizationReport, name: &str) -> String {
    let scored: Vec<(&TrialReport, &String, f64)> = report
        .trials
        .iter()
        .filter_map(|t| Some((t, t.parameters.get(name)?, shown(t)?)))
        .collect();
    let values: Vec<f64> = scored.iter().map(|s| s.2).collect();
    let y = Axis::of(&values, true);
    let numeric: Option<Vec<f64>> = scored.iter().map(|s| s.1.parse::<f64>().ok()).collect();
    let best = report.best.as_ref().map(|b| b.name.as_str());
    let id = format!(
        "chart-param-{}",
        name.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>()
    );
    let title = format!("{} against {name}", report.metric);
    let (mut svg, xs): (String, Vec<f64>) = match numeric {
        Some(xs) if !xs.is_empty() => {
            let x = Axis::of(&xs, true);
            let svg = frame(&id, &title, &x, &y, name, &report.metric);
            (svg, xs.iter().map(|v| px(&x, *v)).collect())
        }
        _ => {
            // Categories: one band each, in order of first appearance.
            let mut cats: Vec<&String> = Vec::new();
            for s in &scored {
                if !cats.contains(&s.1) {
                    cats.push(s.1);
                }
            }
            #[allow(clippy::cast_precision_loss, reason = "a handful of categories")]
            let n = cats.len().max(1) as f64;
            let band = (W - LEFT - RIGHT) / n;
            let x = Axis {
                lo: 0.0,
                hi: 1.0,
                log: false,
            };
            // The frame's numeric x ticks do not apply: labels of the categories instead.
            let mut svg = strip_x_ticks(&frame(&id, &title, &x, &y, name, &report.metric));
            for (i, c) in cats.iter().enumerate() {
                #[allow(clippy::cast_precision_loss, reason = "a handful of categories")]
                let cx = LEFT + band * (i as f64 + 0.5);
                let _ = writeln!(
                    svg,
                    r#"<text x="{cx:.1}" y="{}" text-anchor="middle">{}</text>"#,
                    H - BOTTOM + 18.0,
                    esc(c)
                );
            }
            let xs = scored
                .iter()
                .map(|s| {
                    #[allow(clippy::cast_precision_loss, reason = "a handful of categories")]
                    let i = cats.iter().position(|c| *c == s.1).unwrap_or(0) as f64;
                    LEFT + band * (i + 0.5)
                })
                .collect();
            (svg, xs)
        }
    };
    for ((t, v, objective), xx) in scored.iter().zip(xs) {
        let _ = writeln!(
            svg,
            r#"<circle class="point" cx="{xx:.1}" cy="{:.1}" r="5" fill="{}" fill-opacity="0.8"><title>{}: {name}={}, {}</title></circle>"#,
            py(&y, *objective),
            colour(t, best),
            esc(&t.name),
            esc(v),
            num(*objective)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The frame without its x tick labels (the lines whose text sits just under the plot).
fn strip_x_ticks(svg: &str) -> String {
    let marker = format!(r#"y="{}" text-anchor="middle""#, H - BOTTOM + 18.0);
    svg.lines()
        .filter(|l| !l.contains(&marker))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use kubetrain_client::optimize::BestTrial;

    fn trial(index: u32, lr: &str, opt: &str, objective: Option<f64>, state: &str) -> TrialReport {
        TrialReport {
            name: format!("s-{index}"),
            parameters: BTreeMap::from([("lr".into(), lr.into()), ("opt".into(), opt.into())]),
            objective,
            state: state.into(),
            index,
            intermediate: vec![],
            message: None,
        }
    }

    #[test]
    fn the_page_has_the_table_and_a_chart_per_parameter() {
        let report = OptimizationReport {
            trials: vec![
                trial(0, "0.001", "sgd", Some(0.5), "Succeeded"),
                trial(1, "0.1", "adam", Some(0.1), "Succeeded"),
                trial(2, "0.01", "adam", None, "Failed"),
                trial(3, "0.0001", "sgd", Some(0.9), "Stopped"),
            ],
            best: Some(BestTrial {
                name: "s-1".into(),
                parameters: BTreeMap::new(),
                objective: 0.1,
            }),
            name: "s<x>".into(),
            metric: "loss".into(),
            direction: "Minimize".into(),
            algorithm: "tpe".into(),
        };
        let page = render(&report);
        assert!(page.contains("<code>s&lt;x&gt;</code>"), "escaped");
        assert!(
            page.contains(r#"id="chart-objective""#) && page.contains(r#"id="chart-param-lr""#)
        );
        assert!(page.contains(r#"id="chart-param-opt""#) && page.contains(">adam</text>"));
        assert_eq!(page.matches("<tr class=\"best\">").count(), 1);
        assert!(
            page.contains("1e-4") && page.contains("1e-1"),
            "log axis for lr"
        );
        assert!(!page.contains("<script") && !page.contains("http"));
        // 3 scored trials in the objective chart and in each parameter chart.
        assert_eq!(page.matches("<circle").count(), 9);
    }
}
