//! The report: `acceptance.json` (every measurement, the plan, versions, host facts, one entry per step)
//! and a self-contained `acceptance.html` (inline SVG charts and a pass/fail table; no external files,
//! no network).

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use crate::cost::CostBreakdown;
use crate::plan::Plan;

/// `pass`, `fail` or `skipped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StepVerdict {
    /// Every check of the step held.
    Pass,
    /// A check failed or the step could not run.
    Fail,
    /// Not run, because an earlier step stopped the run.
    Skipped,
}

impl StepVerdict {
    /// `PASS`, `FAIL`, `SKIPPED`.
    pub fn label(self) -> &'static str {
        match self {
            StepVerdict::Pass => "PASS",
            StepVerdict::Fail => "FAIL",
            StepVerdict::Skipped => "SKIPPED",
        }
    }
}

/// One threshold compared with its measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThresholdCheck {
    /// The plan field (`spec.thresholds.minBusbwGbps`).
    pub threshold: String,
    /// `≤ 30s`, `≥ 0.5 GB/s`.
    pub wanted: String,
    /// What was measured, formatted.
    pub measured: String,
    /// Whether it held.
    pub pass: bool,
}

/// One of the seven steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    /// 1..=7.
    pub index: u8,
    /// `queue`, `staging`, `benchmark`, `training`, `restore`, `labels`, `cost`.
    pub name: String,
    /// What the step does, in words.
    pub title: String,
    /// The verdict.
    pub verdict: StepVerdict,
    /// One line: what happened (or why it failed).
    pub message: String,
    /// Wall time of the step.
    pub seconds: f64,
    /// Its measurements (the restore step has `resumed_from_step`).
    pub measurements: Value,
    /// Thresholds checked.
    pub checks: Vec<ThresholdCheck>,
}

/// One training progress point.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainPoint {
    /// Seconds since training started.
    pub t: f64,
    /// Step index.
    pub step: u64,
    /// Loss.
    pub loss: f64,
    /// Samples per second over the last interval (0 for the first point of an attempt).
    pub samples_per_second: f64,
    /// 1 before the deletion, 2 after.
    pub attempt: u32,
}

/// Something that happened during training (a checkpoint, the deletion, the resume).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainEvent {
    /// Seconds since training started.
    pub t: f64,
    /// `checkpoint`, `deletion`, `resumed`.
    pub kind: String,
    /// Words.
    pub label: String,
}

/// One row of the benchmark (nccl-tests columns).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchPoint {
    /// Message size, bytes.
    pub size: u64,
    /// Elements.
    pub count: u64,
    /// Out-of-place time, µs.
    pub time_us: f64,
    /// Out-of-place algorithm bandwidth, GB/s.
    pub algbw: f64,
    /// Out-of-place bus bandwidth, GB/s.
    pub busbw: f64,
    /// Wrong elements.
    pub wrong: u64,
}

/// One staged source.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StagingPoint {
    /// `dataset` or `model`.
    pub name: String,
    /// Bytes downloaded.
    pub bytes: u64,
    /// Files downloaded.
    pub files: u64,
    /// Seconds.
    pub seconds: f64,
    /// MB/s (10^6 bytes).
    pub mbps: f64,
}

/// Facts about the machine that ran the test.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Host {
    /// Host name.
    pub hostname: String,
    /// `linux`.
    pub os: String,
    /// `x86_64`.
    pub arch: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// `MemTotal`, bytes (0 when unknown).
    pub memory_bytes: u64,
}

impl Host {
    /// This machine.
    pub fn this_machine() -> Host {
        let memory_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<u64>().ok())
            })
            .map_or(0, |kb| kb * 1024);
        Host {
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            os: std::env::consts::OS.into(),
            arch: std::env::consts::ARCH.into(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes,
        }
    }
}

/// The whole report (`acceptance.json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `kubetrain.io/acceptance-report/v1`.
    pub format: String,
    /// Plan name.
    pub name: String,
    /// `local` or `cluster`.
    pub mode: String,
    /// Whether every step passed.
    pub passed: bool,
    /// Start, seconds since the Unix epoch.
    pub started_unix: u64,
    /// Wall time of the whole run.
    pub seconds: f64,
    /// Versions (`kubetrain`).
    pub versions: Value,
    /// The machine.
    pub host: Host,
    /// The seven steps, in order.
    pub steps: Vec<StepReport>,
    /// Training progress over time (both attempts).
    pub training: Vec<TrainPoint>,
    /// Checkpoints, the deletion and the resume on the training time axis.
    pub events: Vec<TrainEvent>,
    /// The benchmark table.
    pub benchmark: Vec<BenchPoint>,
    /// The staging results.
    pub staging: Vec<StagingPoint>,
    /// Queue wait, seconds.
    pub queue_wait_seconds: Option<f64>,
    /// The run was stopped by Ctrl-C or SIGTERM (its pods were stopped).
    pub interrupted: bool,
    /// The cost breakdown.
    pub cost: Option<CostBreakdown>,
    /// Labels exported.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The plan as read.
    pub plan: Plan,
}

impl Report {
    /// The step named `name`.
    pub fn step(&self, name: &str) -> Option<&StepReport> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// The first failed step.
    pub fn first_failure(&self) -> Option<&StepReport> {
        self.steps.iter().find(|s| s.verdict == StepVerdict::Fail)
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const W: f64 = 640.0;
const H: f64 = 260.0;
const ML: f64 = 64.0;
const MR: f64 = 16.0;
const MT: f64 = 28.0;
const MB: f64 = 40.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

fn num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    }
}

fn size_label(b: f64) -> String {
    if b >= (1u64 << 20) as f64 {
        format!("{}M", (b / (1u64 << 20) as f64).round())
    } else if b >= 1024.0 {
        format!("{}K", (b / 1024.0).round())
    } else {
        format!("{b}")
    }
}

/// Axis scales of a line chart.
#[derive(Clone, Copy)]
struct Scale {
    /// Sizes: log2 x with power-of-two ticks.
    log_x: bool,
    /// Losses: log10 y.
    log_y: bool,
}

/// The plotted area of a line chart: the data's bounds, and the axes' scales.
struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    log_x: bool,
    log_y: bool,
}

impl Frame {
    /// The bounds of `pts` (y already on the plotted scale) and of the markers' x.
    fn of(pts: &[(f64, f64)], markers: &[(f64, String, &str)], scale: Scale) -> Frame {
        let Scale { log_x, log_y } = scale;
        let mut f = Frame {
            x0: f64::MAX,
            x1: f64::MIN,
            y0: if log_y { f64::MAX } else { 0.0f64 },
            y1: f64::MIN,
            log_x,
            log_y,
        };
        for (x, y) in pts {
            f.x0 = f.x0.min(f.fx(*x));
            f.x1 = f.x1.max(f.fx(*x));
            f.y0 = f.y0.min(*y);
            f.y1 = f.y1.max(*y);
        }
        for (x, _, _) in markers {
            f.x0 = f.x0.min(f.fx(*x));
            f.x1 = f.x1.max(f.fx(*x));
        }
        if f.x1 <= f.x0 {
            f.x1 = f.x0 + 1.0;
        }
        if f.y1 <= f.y0 {
            f.y1 = f.y0 + 1.0;
        }
        f
    }

    /// Sizes: log2 x.
    fn fx(&self, x: f64) -> f64 {
        if self.log_x { x.max(1.0).log2() } else { x }
    }

    fn px(&self, x: f64) -> f64 {
        ML + (self.fx(x) - self.x0) / (self.x1 - self.x0) * (W - ML - MR)
    }

    fn py(&self, y: f64) -> f64 {
        H - MB - (y - self.y0) / (self.y1 - self.y0) * (H - MT - MB)
    }

    fn ylab(&self, y: f64) -> String {
        if self.log_y {
            num(10f64.powf(y))
        } else {
            num(y)
        }
    }

    /// The axes, the y grid with its labels, and the x ticks (powers of two on a log x).
    fn axes(&self, svg: &mut String, x_label: &str, y_label: &str) {
        let _ = write!(
            svg,
            r##"<line x1="{ML}" y1="{b}" x2="{r}" y2="{b}" stroke="#444"/><line x1="{ML}" y1="{MT}" x2="{ML}" y2="{b}" stroke="#444"/>"##,
            b = H - MB,
            r = W - MR
        );
        for i in 0..=4 {
            let y = self.y0 + (self.y1 - self.y0) * f64::from(i) / 4.0;
            let _ = write!(
                svg,
                r##"<text x="{}" y="{}" text-anchor="end" font-size="10">{}</text><line x1="{ML}" x2="{}" y1="{y2}" y2="{y2}" stroke="#eee"/>"##,
                ML - 4.0,
                self.py(y) + 3.0,
                self.ylab(y),
                W - MR,
                y2 = self.py(y)
            );
        }
        let (x0, x1) = (self.x0, self.x1);
        let ticks: Vec<f64> = if self.log_x {
            let (lo, hi) = (x0.ceil() as i64, x1.floor() as i64);
            let stride = ((hi - lo) / 6).max(1) as usize;
            (lo..=hi).step_by(stride).map(|e| e as f64).collect()
        } else {
            (0..=4)
                .map(|i| x0 + (x1 - x0) * f64::from(i) / 4.0)
                .collect()
        };
        for xv in ticks {
            let label = if self.log_x {
                size_label(xv.exp2())
            } else {
                num(xv)
            };
            let _ = write!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="middle" font-size="10">{label}</text>"#,
                ML + (xv - x0) / (x1 - x0) * (W - ML - MR),
                H - MB + 14.0
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="11">{}</text><text x="12" y="{}" font-size="11" transform="rotate(-90 12 {})" text-anchor="middle">{}</text>"#,
            (ML + W - MR) / 2.0,
            H - 6.0,
            esc(x_label),
            (MT + H - MB) / 2.0,
            (MT + H - MB) / 2.0,
            esc(y_label)
        );
    }

    /// One series: its path, its points (at most 400) and its name, in the `i`th color.
    fn series(&self, svg: &mut String, i: usize, name: &str, points: &[(f64, f64)]) {
        let color = COLORS[i % COLORS.len()];
        let d: Vec<String> = points
            .iter()
            .enumerate()
            .map(|(j, (x, y))| {
                format!(
                    "{}{:.1},{:.1}",
                    if j == 0 { "M" } else { "L" },
                    self.px(*x),
                    self.py(*y)
                )
            })
            .collect();
        let _ = write!(
            svg,
            r#"<path class="series" d="{}" fill="none" stroke="{color}" stroke-width="1.5"><title>{}</title></path>"#,
            d.join(" "),
            esc(name)
        );
        for (x, y) in points.iter().take(400) {
            let _ = write!(
                svg,
                r#"<circle class="point" cx="{:.1}" cy="{:.1}" r="1.8" fill="{color}"/>"#,
                self.px(*x),
                self.py(*y)
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" font-size="11" fill="{color}">{}</text>"#,
            ML + 8.0 + 150.0 * i as f64,
            MT + 10.0,
            esc(name)
        );
    }
}

/// A line chart: series of (x, y), optional log axes, vertical markers.
fn line_chart(
    id: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
    scale: Scale,
    markers: &[(f64, String, &str)],
) -> String {
    let log_y = scale.log_y;
    // Log y: values are plotted as log10 (a loss falls by orders of magnitude).
    let series: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(n, p)| {
            let p = p
                .iter()
                .filter(|(_, y)| !log_y || *y > 0.0)
                .map(|&(x, y)| (x, if log_y { y.log10() } else { y }))
                .collect();
            (*n, p)
        })
        .collect();
    let pts: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().copied()).collect();
    let mut svg = format!(
        r#"<svg class="chart" id="{id}" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{t}"><title>{t}</title><text x="{}" y="16" text-anchor="middle" font-weight="bold">{t}</text>"#,
        W / 2.0,
        t = esc(title)
    );
    if pts.is_empty() {
        svg.push_str(r#"<text x="320" y="130" text-anchor="middle">no data</text></svg>"#);
        return svg;
    }
    let frame = Frame::of(&pts, markers, scale);
    frame.axes(&mut svg, x_label, y_label);
    for (x, label, color) in markers {
        let _ = write!(
            svg,
            r#"<line class="marker" x1="{x}" x2="{x}" y1="{MT}" y2="{b}" stroke="{color}" stroke-dasharray="4 3"><title>{l}</title></line>"#,
            x = frame.px(*x),
            b = H - MB,
            l = esc(label)
        );
    }
    for (i, (name, points)) in series.iter().enumerate() {
        if !points.is_empty() {
            frame.series(&mut svg, i, name, points);
        }
    }
    svg.push_str("</svg>");
    svg
}

/// A horizontal bar chart of labelled values.
fn bar_chart(id: &str, title: &str, unit: &str, bars: &[(String, f64, &str)]) -> String {
    let h = MT + 26.0 * bars.len().max(1) as f64 + 12.0;
    let mut svg = format!(
        r#"<svg class="chart" id="{id}" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" aria-label="{t}"><title>{t}</title><text x="{}" y="16" text-anchor="middle" font-weight="bold">{t}</text>"#,
        W / 2.0,
        t = esc(title)
    );
    let max = bars
        .iter()
        .map(|b| b.1)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let max = if max > 0.0 { max } else { 1.0 };
    let label_w = 200.0;
    for (i, (label, v, color)) in bars.iter().enumerate() {
        let y = MT + 26.0 * i as f64;
        let v = if v.is_finite() { *v } else { 0.0 };
        let w = (v / max * (W - label_w - 110.0)).max(1.0);
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end" font-size="11">{}</text><rect class="bar" x="{label_w}" y="{y}" width="{w:.1}" height="18" fill="{color}"><title>{}: {} {}</title></rect><text x="{}" y="{}" font-size="11">{} {}</text>"#,
            label_w - 6.0,
            y + 13.0,
            esc(label),
            esc(label),
            num(v),
            esc(unit),
            label_w + w + 6.0,
            y + 13.0,
            num(v),
            esc(unit)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The self-contained HTML page.
pub fn html(report: &Report) -> String {
    let mut out = String::new();
    html_head(&mut out, report);
    steps_table(&mut out, report);
    out.push_str("</table>\n<h2>Charts</h2>\n");
    queue_and_staging_charts(&mut out, report);
    benchmark_chart(&mut out, report);
    training_charts(&mut out, report);
    cost_charts(&mut out, report);
    tables(&mut out, report);
    // A browser fills this in once it has laid the charts out: the marks with a drawn size per
    // chart (a reader sees it; the headless-browser test reads it).
    out.push_str(SELFCHECK);
    out
}

/// The paragraph a browser fills in with what each chart drew, and the script that does it.
const SELFCHECK: &str = r#"<p id="selfcheck">charts not yet checked by a browser</p>
<script>
window.addEventListener('load', function () {
  var parts = [];
  document.querySelectorAll('svg.chart').forEach(function (svg) {
    var drawn = 0;
    svg.querySelectorAll('path.series, rect.bar, circle.point').forEach(function (m) {
      var b = m.getBBox();
      if (b.width > 0 || b.height > 0) { drawn++; }
    });
    parts.push(svg.id + '=' + drawn);
  });
  document.getElementById('selfcheck').textContent = 'rendered: ' + parts.join(' ');
});
</script>
</body></html>
"#;

/// The page's head, its title line and the steps table's header.
fn html_head(out: &mut String, report: &Report) {
    let verdict = if report.passed { "PASSED" } else { "FAILED" };
    let _ = write!(
        out,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kubetrain acceptance: {name} {verdict}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 70em; color: #222 }}
table {{ border-collapse: collapse; margin: 1em 0 }} td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top }}
.pass {{ color: #1a7f37; font-weight: bold }} .fail {{ color: #cf222e; font-weight: bold }} .skipped {{ color: #777 }}
svg.chart {{ display: block; margin: 1em 0; background: #fcfcfc; border: 1px solid #eee; max-width: 100% }}
code {{ background: #f4f4f4; padding: 0 3px }}
</style></head><body>
<h1>Acceptance: <code>{name}</code> — <span class="{cls}" id="verdict">{verdict}</span></h1>
<p>Mode {mode}; {secs:.1} s; kubetrain {ver}; host {host} ({cpus} CPUs, {mem:.1} GiB).</p>
<h2>Steps</h2>
<table id="steps"><tr><th>#</th><th>step</th><th>verdict</th><th>what happened</th><th>thresholds</th><th>time</th></tr>
"#,
        name = esc(&report.name),
        cls = if report.passed { "pass" } else { "fail" },
        mode = esc(&report.mode),
        secs = report.seconds,
        ver = esc(report
            .versions
            .get("kubetrain")
            .and_then(Value::as_str)
            .unwrap_or("?")),
        host = esc(&report.host.hostname),
        cpus = report.host.cpus,
        mem = report.host.memory_bytes as f64 / (1u64 << 30) as f64,
    );
}

/// One row per step: verdict, message, thresholds, time.
fn steps_table(out: &mut String, report: &Report) {
    for s in &report.steps {
        let checks: Vec<String> = s
            .checks
            .iter()
            .map(|c| {
                format!(
                    r#"<span class="{}">{}</span> <code>{}</code> {} (measured {})"#,
                    if c.pass { "pass" } else { "fail" },
                    if c.pass { "✓" } else { "✗" },
                    esc(&c.threshold),
                    esc(&c.wanted),
                    esc(&c.measured)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            r#"<tr class="step"><td>{}</td><td>{}<br><small>{}</small></td><td class="{}">{}</td><td>{}</td><td>{}</td><td>{:.1} s</td></tr>"#,
            s.index,
            esc(&s.name),
            esc(&s.title),
            match s.verdict {
                StepVerdict::Pass => "pass",
                StepVerdict::Fail => "fail",
                StepVerdict::Skipped => "skipped",
            },
            s.verdict.label(),
            esc(&s.message),
            checks.join("<br>"),
            s.seconds
        );
    }
}

/// The queue wait against its threshold, and the staging throughput.
fn queue_and_staging_charts(out: &mut String, report: &Report) {
    // Queue wait against its threshold.
    let mut q = Vec::new();
    if let Some(w) = report.queue_wait_seconds {
        q.push(("queue wait".to_string(), w, COLORS[0]));
    }
    if let Some(t) = report.plan.spec.thresholds.max_queue_wait {
        q.push(("threshold (max)".to_string(), t.0.as_secs_f64(), "#999"));
    }
    out.push_str(&bar_chart("chart-queue", "Queue wait", "s", &q));
    let st: Vec<(String, f64, &str)> = report
        .staging
        .iter()
        .enumerate()
        .map(|(i, s)| {
            (
                format!("{} ({} bytes)", s.name, s.bytes),
                s.mbps,
                COLORS[i % 4],
            )
        })
        .collect();
    out.push_str(&bar_chart(
        "chart-staging",
        "Staging throughput",
        "MB/s",
        &st,
    ));
}

/// busbw and algbw against the message size.
fn benchmark_chart(out: &mut String, report: &Report) {
    let busbw: Vec<(f64, f64)> = report
        .benchmark
        .iter()
        .map(|b| (b.size as f64, b.busbw))
        .collect();
    let algbw: Vec<(f64, f64)> = report
        .benchmark
        .iter()
        .map(|b| (b.size as f64, b.algbw))
        .collect();
    out.push_str(&line_chart(
        "chart-busbw",
        "all_reduce bandwidth vs size",
        "message size (bytes)",
        "GB/s",
        &[("algbw", algbw), ("busbw", busbw)],
        Scale {
            log_x: true,
            log_y: false,
        },
        &[],
    ));
}

/// The loss and the throughput over time, with the checkpoints, the deletion and the resume.
fn training_charts(out: &mut String, report: &Report) {
    let markers: Vec<(f64, String, &str)> = report
        .events
        .iter()
        .map(|e| {
            let color = match e.kind.as_str() {
                "deletion" => "#d62728",
                "resumed" => "#2ca02c",
                _ => "#999",
            };
            (e.t, format!("{}: {}", e.kind, e.label), color)
        })
        .collect();
    let loss: Vec<(f64, f64)> = report.training.iter().map(|p| (p.t, p.loss)).collect();
    out.push_str(&line_chart(
        "chart-loss",
        "Loss over time (grey: checkpoints, red: pod deletion, green: resumed)",
        "seconds since training started",
        "loss (log scale)",
        &[("loss", loss)],
        Scale {
            log_x: false,
            log_y: true,
        },
        &markers,
    ));
    let tput: Vec<(f64, f64)> = report
        .training
        .iter()
        .filter(|p| p.samples_per_second > 0.0)
        .map(|p| (p.t, p.samples_per_second))
        .collect();
    out.push_str(&line_chart(
        "chart-throughput",
        "Training throughput over time",
        "seconds since training started",
        "samples/s",
        &[("samples/s", tput)],
        Scale {
            log_x: false,
            log_y: false,
        },
        &markers,
    ));
}

/// The cost breakdown, and the cost per unit against the baseline.
fn cost_charts(out: &mut String, report: &Report) {
    if let Some(c) = &report.cost {
        let bars = vec![
            ("compute".to_string(), c.compute, COLORS[0]),
            ("network".to_string(), c.network, COLORS[0]),
            ("storage".to_string(), c.storage, COLORS[0]),
            ("support".to_string(), c.support, COLORS[0]),
            ("idle".to_string(), c.idle, COLORS[0]),
            ("failed runs".to_string(), c.failed_runs, COLORS[1]),
            ("operations".to_string(), c.operations, COLORS[0]),
            ("total".to_string(), c.total, "#444"),
        ];
        out.push_str(&bar_chart(
            "chart-cost",
            &format!("Cost of this run ({})", c.currency),
            &c.currency,
            &bars,
        ));
        let per_unit = vec![
            (
                "effective (this cluster)".to_string(),
                c.effective_cost_per_unit,
                COLORS[0],
            ),
            (
                format!("baseline: {}", c.baseline_name),
                c.baseline_per_unit,
                COLORS[2],
            ),
        ];
        out.push_str(&bar_chart(
            "chart-cost-vs-baseline",
            &format!("Cost per {} vs baseline", c.unit),
            &c.currency,
            &per_unit,
        ));
    }
}

/// The benchmark table and the exported labels.
fn tables(out: &mut String, report: &Report) {
    if !report.benchmark.is_empty() {
        out.push_str("<h2>Benchmark table</h2>\n<table id=\"bench\"><tr><th>size</th><th>count</th><th>time (µs)</th><th>algbw (GB/s)</th><th>busbw (GB/s)</th><th>#wrong</th></tr>\n");
        for b in &report.benchmark {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td></tr>",
                b.size, b.count, b.time_us, b.algbw, b.busbw, b.wrong
            );
        }
        out.push_str("</table>\n");
    }
    if !report.labels.is_empty() {
        out.push_str("<h2>Exported labels</h2>\n<table id=\"labels\">\n");
        for (k, v) in &report.labels {
            let _ = writeln!(
                out,
                "<tr><td><code>{}</code></td><td>{}</td></tr>",
                esc(k),
                esc(v)
            );
        }
        out.push_str("</table>\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        let plan = Plan::from_yaml(crate::plan::tests::MINIMAL).unwrap();
        let cost = crate::cost::compute(
            &plan.spec.cost,
            &plan.spec.baseline,
            &crate::cost::BilledUsage {
                nodes: 2,
                held_seconds: 60.0,
                lost_seconds: 3.0,
                accepted_samples: 5_000_000,
            },
        );
        Report {
            format: "kubetrain.io/acceptance-report/v1".into(),
            name: "t<&>".into(),
            mode: "local".into(),
            passed: true,
            started_unix: 0,
            seconds: 1.0,
            versions: serde_json::json!({"kubetrain": "0.1.0"}),
            host: Host::this_machine(),
            steps: vec![StepReport {
                index: 1,
                name: "queue".into(),
                title: "submit".into(),
                verdict: StepVerdict::Pass,
                message: "admitted <now>".into(),
                seconds: 0.1,
                measurements: Value::Null,
                checks: vec![],
            }],
            training: (0u32..20)
                .map(|i| TrainPoint {
                    t: f64::from(i) * 0.5,
                    step: u64::from(i) * 10,
                    loss: 10.0 / f64::from(i + 1),
                    samples_per_second: 1000.0,
                    attempt: 1 + u32::from(i >= 10),
                })
                .collect(),
            events: vec![TrainEvent {
                t: 4.9,
                kind: "deletion".into(),
                label: "pod x".into(),
            }],
            benchmark: [8u64, 1024, 1 << 20]
                .iter()
                .map(|&size| BenchPoint {
                    size,
                    count: size / 4,
                    time_us: 10.0,
                    algbw: size as f64 / 1e4,
                    busbw: size as f64 / 1e4,
                    wrong: 0,
                })
                .collect(),
            staging: vec![StagingPoint {
                name: "dataset".into(),
                bytes: 1 << 20,
                files: 2,
                seconds: 0.5,
                mbps: 2.1,
            }],
            queue_wait_seconds: Some(0.2),
            interrupted: false,
            cost: Some(cost),
            labels: [("a".to_string(), "b".to_string())].into(),
            plan,
        }
    }

    #[test]
    fn every_chart_has_marks_and_text_is_escaped() {
        let page = html(&sample());
        for id in [
            "chart-queue",
            "chart-staging",
            "chart-busbw",
            "chart-loss",
            "chart-throughput",
            "chart-cost",
            "chart-cost-vs-baseline",
        ] {
            let start = page
                .find(&format!("id=\"{id}\""))
                .unwrap_or_else(|| panic!("{id}"));
            let end = start + page[start..].find("</svg>").unwrap();
            let svg = &page[start..end];
            assert!(
                svg.contains("class=\"series\"") || svg.contains("class=\"bar\""),
                "{id} has no marks"
            );
        }
        assert!(page.contains("t&lt;&amp;&gt;") && page.contains("admitted &lt;now&gt;"));
        assert!(!page.contains("<now>"));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "nothing external"
        );
        // Log-2 ticks of the size axis: powers of two only.
        assert!(
            page.contains(">8</text>")
                && page.contains(">2K</text>")
                && page.contains(">512K</text>"),
            "size ticks"
        );
    }

    #[test]
    fn an_empty_chart_says_so() {
        let mut r = sample();
        r.benchmark.clear();
        assert!(html(&r).contains("no data"));
    }
}
