//! Reports of a scheduler state or a simulation: the JSON shape of `kubetrain queue simulate`, a
//! text table, and a self-contained HTML page with inline SVG charts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::engine::{Sample, SimMetrics, SimOutcome};
use crate::quantity::format_count;
use crate::sched::conditions::Condition;
use crate::sched::{Phase, Scheduler};

/// One pod set of an admission in the JSON report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetAssignmentReport {
    /// Pod set name.
    pub name: String,
    /// Admitted count.
    pub count: i32,
    /// Flavor per resource.
    pub flavors: BTreeMap<String, String>,
    /// Total usage per resource (Kubernetes quantity text).
    pub resource_usage: BTreeMap<String, String>,
    /// Where the pods go (TAS flavors), as Kueue's `topologyAssignment`: levels and per-domain
    /// counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_assignment: Option<crate::tas::TopologyAssignment>,
}

/// One workload in the JSON report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadReport {
    /// `namespace/name`.
    pub key: String,
    /// `Admitted` (quota reserved and every admission check ready: its job runs),
    /// `QuotaReserved` (quota reserved, waiting for admission checks), `Pending`, `Preempted`
    /// (pending after an eviction), `Finished` or `NotArrived` (its `kubetrain.dev/arrival` is
    /// later than the report's time).
    pub state: String,
    /// When a `NotArrived` workload arrives (virtual ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrival_ms: Option<i64>,
    /// ClusterQueue of the current admission.
    pub cluster_queue: Option<String>,
    /// Current admission.
    pub pod_set_assignments: Vec<PodSetAssignmentReport>,
    /// Conditions as Kueue writes them.
    pub conditions: Vec<Condition>,
    /// Admission checks of the current reservation: (name, state).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub admission_checks: Vec<(String, String)>,
    /// Caught in the livelock the simulation stopped on ([`SimOutcome::repeating`]): admitted or preempted
    /// within the loop's last period, so its state is the phase the loop was in when the run stopped.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub repeating: bool,
}

/// The JSON document of `kubetrain queue simulate -o json`.
#[derive(Debug, Clone, Serialize)]
pub struct SimulationReport {
    /// Cycles run.
    pub cycles: u64,
    /// Every workload.
    pub workloads: Vec<WorkloadReport>,
    /// Metrics.
    pub metrics: SimMetrics,
    /// The cycle period of the livelock the run stopped on ([`SimOutcome::repeating_every`]).
    #[serde(rename = "repeatingEvery", skip_serializing_if = "Option::is_none")]
    pub repeating_every: Option<u64>,
}

/// The state word of a workload: a reservation whose admission checks are not all ready is
/// `QuotaReserved`, not `Admitted`.
pub(crate) fn state_word(s: &Scheduler, wl: usize) -> &'static str {
    let st = &s.wls[wl];
    match st.phase {
        Phase::Admitted
            if crate::sched::conditions::find(&st.conditions, "Admitted")
                .is_some_and(|c| c.status == "True") =>
        {
            "Admitted"
        }
        Phase::Admitted => "QuotaReserved",
        Phase::Finished => "Finished",
        Phase::Pending if st.preemptions > 0 => "Preempted",
        Phase::Pending => "Pending",
        Phase::NotArrived if s.model.workloads[wl].arrival_ms > s.now_ms() => "NotArrived",
        Phase::NotArrived => "Pending",
    }
}

/// The report entries of every workload given, also those that have not arrived yet.
pub fn workloads(s: &Scheduler) -> Vec<WorkloadReport> {
    let m = &s.model;
    (0..s.wls.len())
        .map(|w| {
            let st = &s.wls[w];
            let (cq, psa) = match st.admission.as_ref().or(st.finished_admission.as_ref()) {
                None => (None, Vec::new()),
                Some(a) => (
                    Some(m.cqs[a.cq].name.clone()),
                    a.pod_sets
                        .iter()
                        .map(|p| PodSetAssignmentReport {
                            name: p.name.clone(),
                            count: p.count,
                            flavors: p
                                .resources
                                .iter()
                                .map(|&(r, f, _)| {
                                    (m.resources[r].clone(), m.flavors[f].name.clone())
                                })
                                .collect(),
                            resource_usage: p
                                .resources
                                .iter()
                                .map(|&(r, _, v)| {
                                    (m.resources[r].clone(), format_count(&m.resources[r], v))
                                })
                                .collect(),
                            topology_assignment: p.topology.clone(),
                        })
                        .collect(),
                ),
            };
            let state = state_word(s, w);
            WorkloadReport {
                key: m.workloads[w].key.clone(),
                arrival_ms: (state == "NotArrived").then_some(m.workloads[w].arrival_ms),
                state: state.to_string(),
                cluster_queue: cq,
                pod_set_assignments: psa,
                conditions: st.conditions.clone(),
                admission_checks: st
                    .life
                    .checks
                    .iter()
                    .map(|(c, state)| (m.checks[*c].name.clone(), state.as_str().to_string()))
                    .collect(),
                repeating: false,
            }
        })
        .collect()
}

/// The JSON report of a simulation.
pub fn simulation_report(o: &SimOutcome) -> SimulationReport {
    SimulationReport {
        cycles: o.cycles,
        workloads: {
            let mut ws = workloads(&o.sched);
            for &w in &o.repeating {
                if let Some(r) = ws.get_mut(w) {
                    r.repeating = true;
                }
            }
            ws
        },
        metrics: o.metrics.clone(),
        repeating_every: o.repeating_every,
    }
}

/// A plain-text table: workloads (up to `limit`), classes and queues.
pub fn table(o: &SimOutcome, limit: usize) -> String {
    let mut out = String::new();
    let ws = workloads(&o.sched);
    let _ = writeln!(
        out,
        "{:<40} {:<10} {:<20} MESSAGE",
        "WORKLOAD", "STATE", "CLUSTERQUEUE"
    );
    for w in ws.iter().take(limit) {
        // The condition that says most about the state: Finished, else QuotaReserved.
        let msg = ["Finished", "QuotaReserved"]
            .iter()
            .find_map(|t| w.conditions.iter().find(|c| c.type_ == *t))
            .map(|c| c.message.as_str())
            .unwrap_or("");
        let _ = writeln!(
            out,
            "{:<40} {:<10} {:<20} {}",
            w.key,
            w.state,
            w.cluster_queue.as_deref().unwrap_or("-"),
            msg
        );
    }
    if ws.len() > limit {
        let _ = writeln!(out, "... {} more workloads", ws.len() - limit);
    }
    let m = &o.metrics;
    let _ = writeln!(
        out,
        "\ncycles {}  simulated {} ms  preemptions {}",
        o.cycles, m.elapsed_ms, m.preemptions
    );
    let _ = writeln!(
        out,
        "\n{:<16} {:>9} {:>9} {:>12} {:>10} {:>10} {:>10}",
        "CLASS", "WORKLOADS", "ADMITTED", "MEAN(ms)", "P50", "P90", "MAX"
    );
    for (c, st) in &m.classes {
        let _ = writeln!(
            out,
            "{:<16} {:>9} {:>9} {:>12.1} {:>10} {:>10} {:>10}",
            c, st.workloads, st.admitted, st.mean_ms, st.p50_ms, st.p90_ms, st.max_ms
        );
    }
    let _ = writeln!(
        out,
        "\nmean ClusterQueue utilization {:.1}%",
        m.mean_utilization_pct
    );
    if let Some(c) = &m.cost {
        let _ = writeln!(
            out,
            "cost: compute {:.2}, idle {:.2}, preempted runs {:.2}, accepted {}, effective per accepted {:.4}",
            c.compute, c.idle, c.preempted_runs, c.accepted, c.effective_per_accepted
        );
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn line_chart(
    title: &str,
    samples: &[Sample],
    value: impl Fn(&Sample) -> f64,
    unit: &str,
) -> String {
    let (w, h, pad) = (640.0, 220.0, 40.0);
    let t_max = samples.last().map_or(1, |s| s.t_ms).max(1) as f64;
    let v_max = samples.iter().map(&value).fold(0.0, f64::max).max(1e-9);
    let mut pts = String::new();
    for s in samples {
        let x = pad + (w - 2.0 * pad) * s.t_ms as f64 / t_max;
        let y = h - pad - (h - 2.0 * pad) * value(s) / v_max;
        let _ = write!(pts, "{x:.1},{y:.1} ");
    }
    format!(
        r##"<figure><figcaption>{title}</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img"><rect x="0" y="0" width="{w}" height="{h}" fill="#fff" stroke="#ccc"/><line x1="{pad}" y1="{yb}" x2="{xr}" y2="{yb}" stroke="#333"/><line x1="{pad}" y1="{pad}" x2="{pad}" y2="{yb}" stroke="#333"/><polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{pts}"/><text x="{pad}" y="{ty}" font-size="11">0</text><text x="{xr}" y="{ty}" font-size="11" text-anchor="end">{t_max:.0} ms</text><text x="4" y="{pad}" font-size="11">{v_max:.1}{unit}</text></svg></figure>"##,
        yb = h - pad,
        xr = w - pad,
        ty = h - pad + 16.0,
    )
}

fn class_chart(m: &SimMetrics) -> String {
    let (w, pad, row) = (640.0, 120.0, 26.0);
    let h = 30.0 + row * m.classes.len() as f64;
    let v_max = m
        .classes
        .values()
        .map(|c| c.max_ms as f64)
        .fold(1.0, f64::max);
    let mut body = String::new();
    for (i, (name, c)) in m.classes.iter().enumerate() {
        let y = 20.0 + row * i as f64;
        let scale = |v: f64| (w - pad - 20.0) * v / v_max;
        let _ = write!(
            body,
            r##"<text x="4" y="{ty}" font-size="12">{n}</text><rect x="{pad}" y="{y}" width="{wmax:.1}" height="16" fill="#c6dbef"/><rect x="{pad}" y="{y}" width="{w90:.1}" height="16" fill="#6baed6"/><rect x="{pad}" y="{y}" width="{w50:.1}" height="16" fill="#2171b5"/><line x1="{xm:.1}" y1="{y}" x2="{xm:.1}" y2="{yb}" stroke="#d62728" stroke-width="2"/>"##,
            ty = y + 12.0,
            n = esc(name),
            wmax = scale(c.max_ms as f64),
            w90 = scale(c.p90_ms as f64),
            w50 = scale(c.p50_ms as f64),
            xm = pad + scale(c.mean_ms),
            yb = y + 16.0,
        );
    }
    format!(
        r##"<figure><figcaption>Time to admission per class: p50 (dark), p90, max (light), mean (red); scale 0–{v_max:.0} ms</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">{body}</svg></figure>"##
    )
}

/// The lifecycle sections of the HTML page: admission-check waits, pods-ready requeues and TAS
/// placements (each only when the run had any).
fn lifecycle_html(s: &Scheduler) -> String {
    let mut out = String::new();
    admission_checks_html(s, &mut out);
    pods_ready_html(s, &mut out);
    topology_html(s, &mut out);
    out
}

/// The admission checks section: workloads that waited for checks, retried or were rejected.
fn admission_checks_html(s: &Scheduler, out: &mut String) {
    let m = &s.model;
    let waited: Vec<usize> = (0..s.wls.len())
        .filter(|&w| {
            s.wls[w].life.check_wait_ms > 0
                || !s.wls[w].life.checks.is_empty()
                || s.wls[w].life.check_retries > 0
        })
        .collect();
    if !waited.is_empty() {
        let waits: Vec<i64> = waited
            .iter()
            .map(|&w| s.wls[w].life.check_wait_ms)
            .collect();
        let mean = waits.iter().sum::<i64>() as f64 / waits.len() as f64;
        let retries: u32 = waited.iter().map(|&w| s.wls[w].life.check_retries).sum();
        let rejected = waited
            .iter()
            .filter(|&&w| s.wls[w].life.deactivated && s.wls[w].life.pods_ready_timeouts == 0)
            .count();
        let _ = write!(
            out,
            "<h2>Admission checks</h2><p>{} workloads went through admission checks: mean wait from quota reservation to admission {mean:.0} ms, max {} ms; {retries} Retry evictions; {rejected} rejected.</p><table><tr><th>workload</th><th>checks</th><th>waited ms</th><th>retries</th><th>state</th></tr>",
            waited.len(),
            waits.iter().max().copied().unwrap_or(0)
        );
        for &w in waited.iter().take(50) {
            let st = &s.wls[w];
            let checks: Vec<String> = st
                .life
                .checks
                .iter()
                .map(|(c, state)| format!("{} {}", m.checks[*c].name, state.as_str()))
                .collect();
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&m.workloads[w].key),
                esc(&checks.join(", ")),
                st.life.check_wait_ms,
                st.life.check_retries,
                state_word(s, w)
            );
        }
        out.push_str("</table>");
    }
}

/// The waitForPodsReady section: PodsReadyTimeout evictions and deactivations.
fn pods_ready_html(s: &Scheduler, out: &mut String) {
    let m = &s.model;
    let requeued: Vec<usize> = (0..s.wls.len())
        .filter(|&w| s.wls[w].life.pods_ready_timeouts > 0 || s.wls[w].life.deactivated)
        .collect();
    if m.settings.pods_ready.is_some() && !requeued.is_empty() {
        let timeouts: u32 = requeued
            .iter()
            .map(|&w| s.wls[w].life.pods_ready_timeouts)
            .sum();
        let deactivated = requeued
            .iter()
            .filter(|&&w| s.wls[w].life.deactivated)
            .count();
        let _ = write!(
            out,
            "<h2>waitForPodsReady</h2><p>{timeouts} evictions by PodsReadyTimeout over {} workloads; {deactivated} deactivated.</p><table><tr><th>workload</th><th>timeouts</th><th>backoff until ms</th><th>state</th></tr>",
            requeued.len()
        );
        for &w in requeued.iter().take(50) {
            let st = &s.wls[w];
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&m.workloads[w].key),
                st.life.pods_ready_timeouts,
                st.life
                    .backoff_until
                    .map_or("-".to_string(), |t| t.to_string()),
                if st.life.deactivated {
                    "Deactivated"
                } else {
                    state_word(s, w)
                }
            );
        }
        out.push_str("</table>");
    }
}

/// The topology-aware placement section: pod sets placed on topology domains.
fn topology_html(s: &Scheduler, out: &mut String) {
    let m = &s.model;
    let mut placed = String::new();
    let mut n = 0;
    for (w, st) in s.wls.iter().enumerate() {
        let Some(a) = st.admission.as_ref().or(st.finished_admission.as_ref()) else {
            continue;
        };
        for p in &a.pod_sets {
            let Some(t) = &p.topology else { continue };
            n += 1;
            if n > 50 {
                continue;
            }
            let domains: Vec<String> = t
                .domains
                .iter()
                .map(|(v, c)| format!("{} ×{c}", v.join("/")))
                .collect();
            let _ = write!(
                placed,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&m.workloads[w].key),
                esc(&p.name),
                esc(&domains.join(", "))
            );
        }
    }
    if n > 0 {
        let _ = write!(
            out,
            "<h2>Topology-aware placement</h2><p>{n} pod sets placed on topology domains (last or current admission).</p><table><tr><th>workload</th><th>pod set</th><th>domains (pods)</th></tr>{placed}</table>"
        );
    }
}

/// A self-contained HTML page (no scripts, no network) with the charts and tables.
pub fn html(o: &SimOutcome, title: &str) -> String {
    let m = &o.metrics;
    let mut classes = String::new();
    for (c, st) in &m.classes {
        let _ = write!(
            classes,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(c),
            st.workloads,
            st.admitted,
            st.mean_ms,
            st.p50_ms,
            st.p90_ms,
            st.max_ms
        );
    }
    let mut queues = String::new();
    for (q, st) in m.cluster_queues.iter().take(50) {
        let _ = write!(
            queues,
            "<tr><td>{}</td><td>{:.1}%</td><td>{}</td></tr>",
            esc(q),
            st.utilization_pct,
            st.admissions
        );
    }
    let cost = m.cost.as_ref().map_or(String::new(), |c| {
        format!(
            "<h2>Cost</h2><p>compute {:.2}, idle {:.2}, preempted runs {:.2}; {} accepted workloads; effective cost per accepted workload <b>{:.4}</b></p>",
            c.compute, c.idle, c.preempted_runs, c.accepted, c.effective_per_accepted
        )
    });
    format!(
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{t}</title><style>body{{font-family:sans-serif;max-width:720px;margin:2em auto}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}figcaption{{font-weight:bold}}</style></head><body><h1>{t}</h1><p>{cycles} scheduling cycles, {el} ms of virtual time, {p} preemptions, mean ClusterQueue utilization {u:.1}%.</p>{c1}{c2}{c3}<h2>Classes</h2><table><tr><th>class</th><th>workloads</th><th>admitted</th><th>mean ms</th><th>p50</th><th>p90</th><th>max</th></tr>{classes}</table><h2>ClusterQueues</h2><table><tr><th>ClusterQueue</th><th>utilization</th><th>admissions</th></tr>{queues}</table>{cost}{life}</body></html>"#,
        t = esc(title),
        cycles = o.cycles,
        el = m.elapsed_ms,
        p = m.preemptions,
        u = m.mean_utilization_pct,
        c1 = line_chart(
            "Pending workloads over time",
            &o.samples,
            |s| s.pending as f64,
            ""
        ),
        c2 = line_chart(
            "Used share of nominal quota over time",
            &o.samples,
            |s| s.utilization,
            "%"
        ),
        c3 = class_chart(m),
        life = lifecycle_html(&o.sched),
    )
}
