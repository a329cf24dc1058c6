//! `acceptance.html`: the steps table, the charts and the tables, every number in human units
//! ([`crate::units`]) and every chart at the content width ([`crate::chart`]). No script, no external
//! file, nothing but the report.

use std::fmt::Write as _;

use serde_json::Value;

use crate::chart::{self, Axis, Bar, LineChart, Marker, Scale, esc};
use crate::report::{Report, StepVerdict, ThresholdCheck};
use crate::units;

const BLUE: &str = "#1f77b4";
const RED: &str = "#d62728";
const GREEN: &str = "#2ca02c";
const GREY: &str = "#999999";

/// The self-contained HTML page (`acceptance.html`): the steps table, the charts and the tables, every number
/// in human units; no script and nothing loaded from elsewhere.
pub(crate) fn render(report: &Report) -> String {
    let mut out = String::new();
    head(&mut out, report);
    steps_table(&mut out, report);
    out.push_str("<h2>Charts</h2>\n");
    queue_and_staging_charts(&mut out, report);
    benchmark_chart(&mut out, report);
    training_charts(&mut out, report);
    cost_charts(&mut out, report);
    tables(&mut out, report);
    checkpoint_advice(&mut out, report);
    out.push_str("</body></html>\n");
    out
}

/// The page's head and its title line.
fn head(out: &mut String, report: &Report) {
    let verdict = if report.passed { "PASSED" } else { "FAILED" };
    let _ = write!(
        out,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>kubetrain acceptance: {name} {verdict}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 70em; color: #222 }}
table {{ border-collapse: collapse; margin: 1em 0; width: 100% }} td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top }}
td.num, th.num {{ text-align: right; font-variant-numeric: tabular-nums }}
.pass {{ color: #1a7f37; font-weight: bold }} .fail {{ color: #cf222e; font-weight: bold }} .skipped {{ color: #777 }}
svg.chart {{ display: block; width: 100%; height: auto; margin: 1em 0; background: #fcfcfc; border: 1px solid #eee; box-sizing: border-box }}
code {{ background: #f4f4f4; padding: 0 3px; overflow-wrap: anywhere }}
</style></head><body>
<h1>Acceptance: <code>{name}</code> — <span class="{cls}" id="verdict">{verdict}</span></h1>
<p>Mode {mode}; {secs}; kubetrain {ver}; host {host} ({cpus} CPUs, {mem} memory).</p>
"#,
        name = esc(&report.name),
        cls = if report.passed { "pass" } else { "fail" },
        mode = esc(&report.mode),
        secs = units::duration(report.seconds),
        ver = esc(report
            .versions
            .get("kubetrain")
            .and_then(Value::as_str)
            .unwrap_or("?")),
        host = esc(&report.host.hostname),
        cpus = report.host.cpus,
        mem = units::bytes(report.host.memory_bytes),
    );
}

/// One check: ✓/✗, the threshold's field, what it wants and what was measured.
fn check_cell(c: &ThresholdCheck) -> String {
    let field = c.threshold.rsplit('.').next().unwrap_or(&c.threshold);
    format!(
        r#"<span class="{}">{}</span> <code title="{}">{}</code> {}: measured {}"#,
        if c.pass { "pass" } else { "fail" },
        if c.pass { "✓" } else { "✗" },
        esc(&c.threshold),
        esc(field),
        esc(&c.wanted),
        esc(&c.measured)
    )
}

/// One row per step: verdict, what happened and the thresholds with their measurements.
fn steps_table(out: &mut String, report: &Report) {
    out.push_str("<h2>Steps</h2>\n<table id=\"steps\"><tr><th>#</th><th>step</th><th>verdict</th><th>what happened</th><th>thresholds</th></tr>\n");
    for s in &report.steps {
        let checks: Vec<String> = s.checks.iter().map(check_cell).collect();
        let cls = match s.verdict {
            StepVerdict::Pass => "pass",
            StepVerdict::Fail => "fail",
            StepVerdict::Skipped => "skipped",
        };
        let _ = writeln!(
            out,
            r#"<tr class="step"><td>{}</td><td>{}<br><small>{}</small></td><td class="{cls}">{}</td><td>{}</td><td>{}</td></tr>"#,
            s.index,
            esc(&s.name),
            esc(&s.title),
            s.verdict.label(),
            esc(&s.message),
            checks.join("<br>"),
        );
    }
    out.push_str("</table>\n");
}

/// The queue wait against its threshold, and the staging throughput.
fn queue_and_staging_charts(out: &mut String, report: &Report) {
    let mut q = Vec::new();
    if let Some(w) = report.queue_wait_seconds {
        q.push(Bar {
            label: "queue wait".into(),
            value: w,
            color: BLUE,
        });
    }
    if let Some(t) = report.plan.spec.thresholds.max_queue_wait {
        q.push(Bar {
            label: "threshold (max)".into(),
            value: t.0.as_secs_f64(),
            color: GREY,
        });
    }
    out.push_str(&chart::bar_chart(
        "chart-queue",
        "Queue wait",
        "seconds",
        &q,
        &units::duration,
    ));
    let st: Vec<Bar> = report
        .staging
        .iter()
        .map(|s| Bar {
            label: format!("{} ({})", s.name, units::bytes(s.bytes)),
            value: s.mbps,
            color: BLUE,
        })
        .collect();
    out.push_str(&chart::bar_chart(
        "chart-staging",
        "Staging throughput",
        "MB/s",
        &st,
        &units::mbps,
    ));
}

/// busbw and algbw against the message size.
fn benchmark_chart(out: &mut String, report: &Report) {
    let of = |f: fn(&crate::report::BenchPoint) -> f64| -> Vec<(f64, f64)> {
        report
            .benchmark
            .iter()
            .map(|b| (b.size as f64, f(b)))
            .collect()
    };
    out.push_str(&chart::line_chart(&LineChart {
        id: "chart-busbw",
        title: "all_reduce bandwidth by message size",
        x: Axis {
            title: "message size (log scale)",
            scale: Scale::Bytes,
        },
        y: Axis {
            title: "GB/s",
            scale: Scale::FromZero,
        },
        series: vec![
            ("busbw (bus bandwidth)", of(|b| b.busbw)),
            ("algbw (algorithm bandwidth)", of(|b| b.algbw)),
        ],
        markers: Vec::new(),
    }));
}

/// The checkpoints, the deletion and the resume as markers on the training time axis.
fn training_markers(report: &Report) -> Vec<Marker> {
    report
        .events
        .iter()
        .map(|e| {
            let (kind, color) = match e.kind.as_str() {
                "deletion" => ("pod deletion", RED),
                "resumed" => ("resumed", GREEN),
                _ => ("checkpoint", GREY),
            };
            Marker {
                x: e.t,
                kind,
                color,
                label: e.label.clone(),
            }
        })
        .collect()
}

/// The loss (log scale, from the data's range) and the throughput over time, with the markers.
fn training_charts(out: &mut String, report: &Report) {
    let by_attempt = |attempt: u32, f: fn(&crate::report::TrainPoint) -> f64| -> Vec<(f64, f64)> {
        let points = report
            .training
            .iter()
            .filter(|p| (p.attempt <= 1) == (attempt <= 1));
        points.map(|p| (p.t, f(p))).filter(|p| p.1 > 0.0).collect()
    };
    out.push_str(&chart::line_chart(&LineChart {
        id: "chart-loss",
        title: "Training loss over time",
        x: Axis {
            title: "seconds since training started",
            scale: Scale::Linear,
        },
        y: Axis {
            title: "loss (log scale)",
            scale: Scale::Log10,
        },
        series: vec![
            ("before the deletion", by_attempt(1, |p| p.loss)),
            ("after the restart", by_attempt(2, |p| p.loss)),
        ],
        markers: training_markers(report),
    }));
    out.push_str(&chart::line_chart(&LineChart {
        id: "chart-throughput",
        title: "Training throughput over time",
        x: Axis {
            title: "seconds since training started",
            scale: Scale::Linear,
        },
        y: Axis {
            title: "samples/s",
            scale: Scale::FromZero,
        },
        series: vec![
            (
                "before the deletion",
                by_attempt(1, |p| p.samples_per_second),
            ),
            ("after the restart", by_attempt(2, |p| p.samples_per_second)),
        ],
        markers: training_markers(report),
    }));
}

/// The cost breakdown, and the cost per unit against the baseline.
fn cost_charts(out: &mut String, report: &Report) {
    let Some(c) = &report.cost else { return };
    let money = |v: f64| units::money(v, &c.currency);
    let bar = |label: &str, value: f64, color| Bar {
        label: label.into(),
        value,
        color,
    };
    let bars = [
        bar("compute", c.compute, BLUE),
        bar("network", c.network, BLUE),
        bar("storage", c.storage, BLUE),
        bar("support", c.support, BLUE),
        bar("idle", c.idle, BLUE),
        bar("failed runs", c.failed_runs, RED),
        bar("operations", c.operations, BLUE),
        bar("total", c.total, "#444444"),
    ];
    let title = format!("Cost of this run ({})", c.currency);
    out.push_str(&chart::bar_chart(
        "chart-cost",
        &title,
        &c.currency,
        &bars,
        &money,
    ));
    let per_unit = [
        bar("effective (this cluster)", c.effective_cost_per_unit, BLUE),
        bar(
            &format!("baseline: {}", c.baseline_name),
            c.baseline_per_unit,
            GREEN,
        ),
    ];
    let title = format!("Cost per {} vs baseline", c.unit);
    let axis = format!("{} per {}", c.currency, c.unit);
    out.push_str(&chart::bar_chart(
        "chart-cost-vs-baseline",
        &title,
        &axis,
        &per_unit,
        &money,
    ));
}

/// The checkpoint interval that costs least (`checkpointAdvice`): one table, the current interval against the
/// optimal one.
fn checkpoint_advice(out: &mut String, report: &Report) {
    let Some(a) = &report.checkpoint_advice else {
        return;
    };
    let currency = &report.plan.spec.cost.currency;
    let _ = writeln!(
        out,
        "<h2>Checkpoint interval</h2>\n<p>{} interruptions per node-hour × {} nodes: one every {}; a checkpoint \
takes {}, a restart {} (Young/Daly, docs/acceptance.md). Young's interval {}, Daly's {}.</p>",
        units::number(a.interruptions_per_node_hour),
        a.nodes,
        units::duration(a.mtbf_seconds),
        units::duration(a.checkpoint_seconds),
        units::duration(a.restart_seconds),
        units::duration(a.young_interval_seconds),
        units::duration(a.daly_interval_seconds),
    );
    out.push_str("<table id=\"checkpoint-advice\"><tr><th></th><th class=\"num\">interval</th><th class=\"num\">time lost</th><th class=\"num\">GPU-hours lost per week</th><th class=\"num\">cost per week</th></tr>\n");
    let cost = |v: Option<f64>| v.map_or_else(|| "—".to_owned(), |v| units::money(v, currency));
    for (label, interval, share, hours, money) in [
        (
            "current",
            a.current_interval_seconds,
            a.lost_share.current,
            a.lost_gpu_hours_per_week.current,
            a.lost_cost_per_week.map(|c| c.current),
        ),
        (
            "optimal",
            a.optimal_interval_seconds,
            a.lost_share.optimal,
            a.lost_gpu_hours_per_week.optimal,
            a.lost_cost_per_week.map(|c| c.optimal),
        ),
    ] {
        let _ = writeln!(
            out,
            r#"<tr><td>{label}</td><td class="num">{}</td><td class="num">{} %</td><td class="num">{}</td><td class="num">{}</td></tr>"#,
            units::duration(interval),
            units::number(share * 100.0),
            units::number(hours),
            cost(money)
        );
    }
    out.push_str("</table>\n");
}

/// The benchmark table and the exported labels.
fn tables(out: &mut String, report: &Report) {
    if !report.benchmark.is_empty() {
        out.push_str("<h2>Benchmark table</h2>\n<table id=\"bench\"><tr><th class=\"num\">size</th><th class=\"num\">elements</th><th class=\"num\">time (µs)</th><th class=\"num\">algbw</th><th class=\"num\">busbw</th><th class=\"num\">wrong</th></tr>\n");
        for b in &report.benchmark {
            let _ = writeln!(
                out,
                r#"<tr><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td></tr>"#,
                units::bytes(b.size),
                units::fixed(b.count as f64, 0),
                units::fixed(b.time_us, 1),
                units::gbps(b.algbw),
                units::gbps(b.busbw),
                b.wrong
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
