//! The seven steps, once, over a [`Backend`]: the backend measures (on this machine or through the API
//! server), the step functions here judge — thresholds, verdicts, progress lines and the report — the
//! same way in both modes.

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use crate::cost::{self, BilledUsage, CostBreakdown};
use crate::error::StepFailure;
use crate::plan::Plan;
use crate::report::{BenchPoint, Report, StagingPoint, ThresholdCheck, TrainEvent, TrainPoint};
use crate::steps::{Steps, check_max, check_min};

/// Where the steps run: the measurements each step needs, in that step's order. A method that returns
/// [`StepFailure`] fails its step (and skips the rest); the runner judges everything else.
pub(crate) trait Backend {
    /// The queue label of a plan without `spec.queue.name`.
    fn default_queue(&self) -> &'static str;
    /// This run's own directory (`labels.txt` goes there).
    fn out_dir(&self) -> &Path;
    /// Why the run stopped, when Ctrl-C or SIGTERM stopped it and the backend lets the steps end on
    /// their own (local mode); a backend whose steps are cancelled instead says `None`.
    fn interrupted(&self) -> Option<&'static str> {
        None
    }
    /// Step 1: submit the benchmark TrainJob through the queue and wait for its admission.
    async fn queue(&mut self, steps: &mut Steps<'_>) -> Result<Queued, StepFailure>;
    /// Step 2: stage the dataset and the model into the job's `/workspace`.
    async fn stage(&mut self) -> Result<Staged, StepFailure>;
    /// Step 3: run the benchmark in the job's pods to its end.
    async fn benchmark(&mut self) -> Result<Benched, StepFailure>;
    /// Step 3's message when the benchmark did not finish cleanly (`wrong` elements in all).
    fn bench_failure(&self, bench: &Benched, wrong: u64) -> String;
    /// Steps 4 and 5: train with checkpoints, delete a pod after them and watch the job resume.
    async fn train(&mut self, steps: &mut Steps<'_>) -> Result<Trained, StepFailure>;
    /// Lets go of what the queue admitted (the local queue's entry) once the job's pods are done.
    fn release(&mut self) {}
}

/// Step 1's measurements.
pub(crate) struct Queued {
    /// When the wait began (the step's time is from there).
    pub(crate) since: Instant,
    /// Seconds from submission to admission (or to giving up).
    pub(crate) wait: f64,
    /// The admission, in words, or why there was none.
    pub(crate) admitted: Result<String, String>,
    pub(crate) measurements: Value,
}

/// Step 2's measurements.
pub(crate) struct Staged {
    pub(crate) points: Vec<StagingPoint>,
    /// MB/s over every source; `None` when the bytes were not reported.
    pub(crate) mbps: Option<f64>,
    pub(crate) message: String,
    pub(crate) measurements: Value,
    /// A source could not be staged (no threshold is checked then).
    pub(crate) failed: bool,
}

/// Step 3's measurements.
pub(crate) struct Benched {
    /// The nccl-tests table, by message size.
    pub(crate) rows: Vec<BenchPoint>,
    /// The benchmark job completed.
    pub(crate) complete: bool,
    /// How the job ended, in words.
    pub(crate) end_message: String,
    /// The pods' last line on stderr (local mode).
    pub(crate) last_stderr: Option<String>,
    /// Measurements besides the table (`trainJob`).
    pub(crate) extra: serde_json::Map<String, Value>,
}

/// Steps 4 and 5's measurements.
pub(crate) struct Trained {
    pub(crate) since: Instant,
    pub(crate) points: Vec<TrainPoint>,
    pub(crate) events: Vec<TrainEvent>,
    /// The throughput judged against `minSamplesPerSecond`.
    pub(crate) samples_per_second: f64,
    /// No steps or no checkpoints were seen.
    pub(crate) failed: bool,
    pub(crate) message: String,
    pub(crate) measurements: Value,
    pub(crate) restore: Restored,
    /// What the job held, for the cost.
    pub(crate) usage: BilledUsage,
}

/// Step 5's measurements.
pub(crate) struct Restored {
    /// From the deletion to the first step after the resume.
    pub(crate) seconds: Option<f64>,
    /// Why the restore was not proven; `None` when it was.
    pub(crate) failure: Option<String>,
    pub(crate) message: String,
    pub(crate) measurements: Value,
}

/// What steps 6 and 7 need of the earlier ones.
struct Measured {
    wait: f64,
    mbps: f64,
    busbw: f64,
    usage: BilledUsage,
}

/// Runs the seven steps on `backend`, recording them in `steps` and `report`.
pub(crate) async fn run_steps<B: Backend>(
    backend: &mut B,
    plan: &Plan,
    steps: &mut Steps<'_>,
    report: &mut Report,
) {
    let Some(wait) = queue(backend, plan, steps, report).await else {
        return;
    };
    let measured = job_steps(backend, plan, steps, report, wait).await;
    backend.release();
    if let Some(why) = backend.interrupted() {
        report.interrupted = true;
        steps.skip_rest(why);
        return;
    }
    let Some(m) = measured else {
        return;
    };
    let breakdown = cost::compute(&plan.spec.cost, &plan.spec.baseline, &m.usage);
    let default_queue = backend.default_queue();
    labels(
        plan,
        backend.out_dir(),
        default_queue,
        &m,
        &breakdown,
        steps,
        report,
    );
    cost_step(plan, &m.usage, breakdown, steps, report);
}

/// Steps 2 to 5, while the job holds its admission; `None` when one stopped the run.
async fn job_steps<B: Backend>(
    backend: &mut B,
    plan: &Plan,
    steps: &mut Steps<'_>,
    report: &mut Report,
    wait: f64,
) -> Option<Measured> {
    let mbps = staging(backend, plan, steps, report).await?;
    let busbw = benchmark(backend, plan, steps, report).await?;
    let usage = training(backend, plan, steps, report).await?;
    Some(Measured {
        wait,
        mbps,
        busbw,
        usage,
    })
}

/// Step 1: the wait is judged against `maxQueueWait`; returns it once admitted.
async fn queue<B: Backend>(
    backend: &mut B,
    plan: &Plan,
    steps: &mut Steps<'_>,
    report: &mut Report,
) -> Option<f64> {
    let t = Instant::now();
    let q = match backend.queue(steps).await {
        Ok(q) => q,
        Err(e) => {
            steps.fail_rest(t, e.0, "queue");
            return None;
        }
    };
    report.queue_wait_seconds = Some(q.wait);
    let checks: Vec<ThresholdCheck> = check_max(
        "spec.thresholds.maxQueueWait",
        plan.spec
            .thresholds
            .max_queue_wait
            .map(|d| d.0.as_secs_f64()),
        q.wait,
        "s",
    )
    .into_iter()
    .collect();
    match q.admitted {
        Ok(msg) => {
            if steps.finish(q.since, msg, q.measurements, checks, false) {
                return Some(q.wait);
            }
            steps.skip_rest("the queue step failed");
        }
        Err(why) => {
            report.interrupted = backend.interrupted().is_some();
            steps.finish(q.since, why, q.measurements, checks, true);
            steps.skip_rest("the job was not admitted");
        }
    }
    None
}

/// Step 2: the staging throughput is judged against `minStagingMbps`; returns the MB/s (0 when not
/// reported).
async fn staging<B: Backend>(
    backend: &mut B,
    plan: &Plan,
    steps: &mut Steps<'_>,
    report: &mut Report,
) -> Option<f64> {
    let t = Instant::now();
    let s = match backend.stage().await {
        Ok(s) => s,
        Err(e) => {
            steps.fail_rest(t, e.0, "staging");
            return None;
        }
    };
    report.staging = s.points;
    let min = plan.spec.thresholds.min_staging_mbps;
    let checks: Vec<ThresholdCheck> = match (s.failed, s.mbps) {
        (true, _) => Vec::new(),
        (false, None) => min
            .map(|min| ThresholdCheck {
                threshold: "spec.thresholds.minStagingMbps".into(),
                wanted: format!("≥ {}", crate::units::mbps(min)),
                measured: "not reported (the trainer reports dataset_bytes and model_bytes; kubetrain collective bench does)".into(),
                pass: false,
            })
            .into_iter()
            .collect(),
        (false, Some(mbps)) => check_min("spec.thresholds.minStagingMbps", min, mbps, "MB/s")
            .into_iter()
            .collect(),
    };
    if steps.finish(t, s.message, s.measurements, checks, s.failed) {
        return Some(s.mbps.unwrap_or(0.0));
    }
    steps.skip_rest("the staging step failed");
    None
}

/// Step 3: busbw at the largest size is judged against `minBusbwGbps`, and every element must be right;
/// returns that busbw.
async fn benchmark<B: Backend>(
    backend: &mut B,
    plan: &Plan,
    steps: &mut Steps<'_>,
    report: &mut Report,
) -> Option<f64> {
    let t = Instant::now();
    let b = match backend.benchmark().await {
        Ok(b) => b,
        Err(e) => {
            steps.fail_rest(t, e.0, "benchmark");
            return None;
        }
    };
    report.benchmark = b.rows.clone();
    let wrong: u64 = b.rows.iter().map(|r| r.wrong).sum();
    let last = b.rows.last();
    let busbw = last.map_or(0.0, |r| r.busbw);
    let failed = !b.complete || b.rows.is_empty() || wrong > 0;
    let (msg, checks) = if failed {
        (backend.bench_failure(&b, wrong), Vec::new())
    } else {
        let msg = format!(
            "all_reduce over {} pods: busbw {} at {}, {} sizes, 0 wrong",
            plan.num_nodes(),
            crate::units::gbps(busbw),
            crate::units::bytes(last.map_or(0, |r| r.size)),
            b.rows.len()
        );
        let min = plan.spec.thresholds.min_busbw_gbps;
        let check = check_min("spec.thresholds.minBusbwGbps", min, busbw, "GB/s");
        (msg, check.into_iter().collect())
    };
    let mut measurements = json!({"rows": b.rows, "busbwAtMaxGbps": busbw, "pods": plan.num_nodes(), "backend": plan.spec.benchmark.backend});
    if let Value::Object(m) = &mut measurements {
        m.extend(b.extra);
    }
    if steps.finish(t, msg, measurements, checks, failed) {
        return Some(busbw);
    }
    steps.skip_rest("the benchmark step failed");
    None
}

/// Steps 4 and 5: the throughput is judged against `minSamplesPerSecond`, the restore time against
/// `maxRestoreTime`. A failure of either still lets the labels and the cost run; returns the usage.
async fn training<B: Backend>(
    backend: &mut B,
    plan: &Plan,
    steps: &mut Steps<'_>,
    report: &mut Report,
) -> Option<BilledUsage> {
    let t = Instant::now();
    let trained = match backend.train(steps).await {
        Ok(x) => x,
        Err(e) => {
            steps.fail_rest(t, e.0, "training");
            return None;
        }
    };
    let th = &plan.spec.thresholds;
    report.checkpoint_advice =
        crate::checkpoint_advice::from_run(plan, &trained.measurements, trained.restore.seconds);
    report.training = trained.points;
    report.events.extend(trained.events);
    let checks: Vec<ThresholdCheck> = check_min(
        "spec.thresholds.minSamplesPerSecond",
        th.min_samples_per_second,
        trained.samples_per_second,
        "samples/s",
    )
    .into_iter()
    .collect();
    let (message, measurements) = (trained.message, trained.measurements);
    steps.finish(trained.since, message, measurements, checks, trained.failed);
    restore(plan, trained.restore, steps);
    Some(trained.usage)
}

/// Step 5's verdict.
fn restore(plan: &Plan, r: Restored, steps: &mut Steps<'_>) {
    let t = Instant::now();
    let max = plan.spec.thresholds.max_restore_time;
    let checks: Vec<ThresholdCheck> = r
        .seconds
        .and_then(|s| {
            check_max(
                "spec.thresholds.maxRestoreTime",
                max.map(|d| d.0.as_secs_f64()),
                s,
                "s",
            )
        })
        .into_iter()
        .collect();
    let failed = r.failure.is_some();
    let message = r.failure.unwrap_or(r.message);
    steps.finish(t, message, r.measurements, checks, failed);
}

/// `{:.4}`, or `inf`.
fn label_number(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.4}")
    } else {
        "inf".into()
    }
}

/// The measured labels (`kubetrain.io/…`), `default_queue` for a plan without `spec.queue.name`.
fn derived_labels(
    plan: &Plan,
    default_queue: &str,
    m: &Measured,
    breakdown: &CostBreakdown,
) -> Vec<(&'static str, String)> {
    let spec = &plan.spec;
    let gpus = m
        .usage
        .nodes
        .saturating_mul(u64::from(spec.cost.gpus_per_node));
    let storage = if spec.checkpoint.location.starts_with("s3://") {
        "s3"
    } else {
        "directory"
    };
    let queue = spec.queue.name.as_deref().unwrap_or(default_queue);
    vec![
        ("kubetrain.io/acceptance-plan", plan.metadata.name.clone()),
        ("kubetrain.io/gpu-count", gpus.to_string()),
        ("kubetrain.io/gpu-hours", label_number(breakdown.gpu_hours)),
        ("kubetrain.io/network-busbw-gbps", label_number(m.busbw)),
        (
            "kubetrain.io/network-backend",
            spec.benchmark.backend.clone(),
        ),
        ("kubetrain.io/storage-staging-mbps", label_number(m.mbps)),
        ("kubetrain.io/storage-checkpoint", storage.into()),
        ("kubetrain.io/queue", queue.into()),
        ("kubetrain.io/queue-wait-seconds", label_number(m.wait)),
        (
            "kubetrain.io/cost-per-unit",
            label_number(breakdown.effective_cost_per_unit),
        ),
        (
            "kubetrain.io/cost-vs-baseline",
            label_number(breakdown.ratio_to_baseline),
        ),
        ("kubetrain.io/cost-currency", spec.cost.currency.clone()),
    ]
}

/// A value that is not a valid Kubernetes label value.
fn bad_label_value(v: &str) -> bool {
    v.len() > 63
        || !v
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Step 6: the plan's labels and the measured ones, written to `labels.txt` in `out_dir`; every value
/// must be a valid label value.
fn labels(
    plan: &Plan,
    out_dir: &Path,
    default_queue: &str,
    m: &Measured,
    breakdown: &CostBreakdown,
    steps: &mut Steps<'_>,
    report: &mut Report,
) {
    let t = Instant::now();
    let mut labels = plan.spec.labels.clone();
    for (k, v) in derived_labels(plan, default_queue, m, breakdown) {
        labels.insert(k.into(), v);
    }
    let bad: Vec<String> = labels
        .iter()
        .filter(|(_, v)| bad_label_value(v))
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    let text: String = labels.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    let written = std::fs::write(out_dir.join("labels.txt"), text);
    report.labels = labels.clone();
    let msg = match (&written, bad.is_empty()) {
        (Err(e), _) => format!("writing labels.txt: {e}"),
        (Ok(()), false) => format!("not valid Kubernetes label values: {}", bad.join(", ")),
        (Ok(()), true) => format!(
            "{} labels (GPU, network, storage, queue, cost) in labels.txt",
            labels.len()
        ),
    };
    let failed = written.is_err() || !bad.is_empty();
    let measurements = json!({"labels": labels, "file": "labels.txt"});
    steps.finish(t, msg, measurements, vec![], failed);
}

/// Step 7: the effective cost per unit against the baseline, judged against `maxCostPerUnit`.
fn cost_step(
    plan: &Plan,
    usage: &BilledUsage,
    breakdown: CostBreakdown,
    steps: &mut Steps<'_>,
    report: &mut Report,
) {
    let t = Instant::now();
    let checks: Vec<ThresholdCheck> = check_max(
        "spec.thresholds.maxCostPerUnit",
        plan.spec.thresholds.max_cost_per_unit,
        breakdown.effective_cost_per_unit,
        &breakdown.currency,
    )
    .into_iter()
    .collect();
    let msg = format!(
        "{} per {} (total {} over {} units) vs {} at {}: {}× the baseline",
        crate::units::money(breakdown.effective_cost_per_unit, &breakdown.currency),
        breakdown.unit,
        crate::units::money(breakdown.total, &breakdown.currency),
        crate::units::number(breakdown.accepted_units),
        breakdown.baseline_name,
        crate::units::money(breakdown.baseline_per_unit, &breakdown.currency),
        crate::units::number(breakdown.ratio_to_baseline)
    );
    let measurements = json!({"usage": usage, "breakdown": breakdown, "formula": "(compute + network + storage + support + idle + failed_runs + operations) / accepted_workload_units"});
    steps.finish(t, msg, measurements, checks, false);
    report.cost = Some(breakdown);
}

/// The mean of `values`, 0 for none.
pub(crate) fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::MINIMAL;
    use crate::report::StepVerdict;
    use crate::steps::{self, conclude};

    /// A backend of canned measurements: every step passes unless a test changes it.
    struct Canned {
        out_dir: tempfile::TempDir,
        busbw: f64,
        wrong: u64,
        restore_failure: Option<String>,
        stopped: bool,
    }

    impl Canned {
        fn new() -> Self {
            Canned {
                out_dir: tempfile::tempdir().unwrap(),
                busbw: 5.0,
                wrong: 0,
                restore_failure: None,
                stopped: false,
            }
        }
    }

    impl Backend for Canned {
        fn default_queue(&self) -> &'static str {
            "canned"
        }

        fn out_dir(&self) -> &Path {
            self.out_dir.path()
        }

        fn interrupted(&self) -> Option<&'static str> {
            self.stopped.then_some("stopped")
        }

        async fn queue(&mut self, _: &mut Steps<'_>) -> Result<Queued, StepFailure> {
            Ok(Queued {
                since: Instant::now(),
                wait: 1.0,
                admitted: Ok("admitted".into()),
                measurements: Value::Null,
            })
        }

        async fn stage(&mut self) -> Result<Staged, StepFailure> {
            Ok(Staged {
                points: Vec::new(),
                mbps: Some(10.0),
                message: "staged".into(),
                measurements: Value::Null,
                failed: false,
            })
        }

        async fn benchmark(&mut self) -> Result<Benched, StepFailure> {
            let row = BenchPoint {
                size: 1024,
                count: 256,
                time_us: 1.0,
                algbw: self.busbw,
                busbw: self.busbw,
                wrong: self.wrong,
            };
            Ok(Benched {
                rows: vec![row],
                complete: true,
                end_message: "done".into(),
                last_stderr: None,
                extra: serde_json::Map::new(),
            })
        }

        fn bench_failure(&self, _: &Benched, wrong: u64) -> String {
            format!("{wrong} wrong")
        }

        async fn train(&mut self, _: &mut Steps<'_>) -> Result<Trained, StepFailure> {
            Ok(Trained {
                since: Instant::now(),
                points: Vec::new(),
                events: Vec::new(),
                samples_per_second: 100.0,
                failed: false,
                message: "trained".into(),
                measurements: Value::Null,
                restore: Restored {
                    seconds: Some(1.0),
                    failure: self.restore_failure.clone(),
                    message: "restored".into(),
                    measurements: Value::Null,
                },
                usage: BilledUsage {
                    nodes: 2,
                    held_seconds: 60.0,
                    lost_seconds: 1.0,
                    accepted_samples: 1_000_000,
                },
            })
        }
    }

    /// Runs the steps of `plan_text` on `backend`: the report and the progress lines.
    fn run(plan_text: &str, backend: &mut Canned) -> (Report, Vec<String>) {
        let plan = Plan::from_yaml(plan_text).unwrap();
        let mut lines = Vec::new();
        let mut progress = |l: &str| lines.push(l.to_string());
        let mut steps = Steps::new(&mut progress);
        let mut report = steps::new_report(&plan, "test", json!({}));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(run_steps(backend, &plan, &mut steps, &mut report));
        let done = std::mem::take(&mut steps.done);
        drop(steps);
        (conclude(report, done, Instant::now()), lines)
    }

    fn verdicts(report: &Report) -> Vec<StepVerdict> {
        report.steps.iter().map(|s| s.verdict).collect()
    }

    #[test]
    fn every_step_passes_and_the_labels_are_written() {
        let mut backend = Canned::new();
        let (report, lines) = run(MINIMAL, &mut backend);
        assert!(report.passed, "{lines:?}");
        assert_eq!(
            lines[2],
            "[3/7] benchmark: PASS — all_reduce over 2 pods: busbw 5.00 GB/s at 1 KiB, 1 sizes, 0 wrong"
        );
        assert_eq!(report.labels["kubetrain.io/queue"], "canned");
        let labels = std::fs::read_to_string(backend.out_dir.path().join("labels.txt")).unwrap();
        assert!(
            labels.contains("kubetrain.io/network-busbw-gbps=5.0000\n"),
            "{labels}"
        );
    }

    #[test]
    fn a_threshold_fails_its_step_and_the_benchmark_stops_the_run() {
        let mut backend = Canned::new();
        backend.busbw = 0.5;
        let plan = MINIMAL.replace(
            "{maxQueueWait: 30s}",
            "{maxQueueWait: 30s, minBusbwGbps: 2}",
        );
        let (report, lines) = run(&plan, &mut backend);
        use StepVerdict::{Fail, Pass, Skipped};
        assert_eq!(
            verdicts(&report),
            [Pass, Pass, Fail, Skipped, Skipped, Skipped, Skipped]
        );
        assert!(
            lines[2]
                .ends_with("; spec.thresholds.minBusbwGbps wants ≥ 2.00 GB/s, measured 0.500 GB/s"),
            "{}",
            lines[2]
        );
        assert_eq!(
            lines[3],
            "[4/7] training: SKIPPED — the benchmark step failed"
        );
        assert!(!report.labels.contains_key("kubetrain.io/queue"));
        assert_eq!(report.labels["kubetrain.io/acceptance-result"], "failed");
    }

    #[test]
    fn wrong_elements_fail_the_benchmark_with_the_backends_message() {
        let mut backend = Canned::new();
        backend.wrong = 3;
        let (report, lines) = run(MINIMAL, &mut backend);
        assert_eq!(report.steps[2].verdict, StepVerdict::Fail);
        assert_eq!(lines[2], "[3/7] benchmark: FAIL — 3 wrong");
    }

    #[test]
    fn a_failed_restore_still_lets_labels_and_cost_run() {
        let mut backend = Canned::new();
        backend.restore_failure = Some("resumed from step 0".into());
        let (report, lines) = run(MINIMAL, &mut backend);
        use StepVerdict::{Fail, Pass};
        assert_eq!(
            verdicts(&report),
            [Pass, Pass, Pass, Pass, Fail, Pass, Pass]
        );
        assert_eq!(lines[4], "[5/7] restore: FAIL — resumed from step 0");
        assert!(report.cost.is_some());
        assert!(!report.passed);
    }

    #[test]
    fn an_interrupt_the_backend_reports_skips_labels_and_cost() {
        let mut backend = Canned::new();
        backend.stopped = true;
        let (report, lines) = run(MINIMAL, &mut backend);
        assert!(report.interrupted);
        assert_eq!(report.steps[5].verdict, StepVerdict::Skipped);
        assert_eq!(lines[5], "[6/7] labels: SKIPPED — stopped");
        assert!(report.cost.is_none());
    }
}
