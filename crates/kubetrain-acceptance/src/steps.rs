//! The verdict code both modes share: the seven steps' names, a step's verdict from its checks and the
//! progress line it prints, the skipped rest, the threshold checks and the report's frame.

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime};

use serde_json::{Value, json};

use crate::plan::Plan;
use crate::report::{Host, Report, StepReport, StepVerdict, ThresholdCheck};

/// Names of the seven steps, in order, with what each does.
pub(crate) const STEPS: [(&str, &str); 7] = [
    ("queue", "submit the TrainJob through the queue"),
    (
        "staging",
        "fetch the dataset sample and the base model weights",
    ),
    ("benchmark", "all-reduce benchmark across the job's pods"),
    ("training", "train for the window, writing checkpoints"),
    (
        "restore",
        "delete a pod, restart, resume from the checkpoint",
    ),
    (
        "labels",
        "export GPU, network, storage, queue and cost labels",
    ),
    ("cost", "effective cost per unit vs the baseline"),
];

/// Collects the steps as they finish, printing one progress line each.
pub(crate) struct Steps<'a> {
    pub(crate) done: Vec<StepReport>,
    pub(crate) progress: &'a mut (dyn FnMut(&str) + Send),
}

impl<'a> Steps<'a> {
    pub(crate) fn new(progress: &'a mut (dyn FnMut(&str) + Send)) -> Self {
        Steps {
            done: Vec::new(),
            progress,
        }
    }

    /// Records the next step: it fails when `failed` or when a check did not hold. Returns whether it
    /// passed.
    pub(crate) fn finish(
        &mut self,
        started: Instant,
        message: String,
        measurements: Value,
        checks: Vec<ThresholdCheck>,
        failed: bool,
    ) -> bool {
        let index = self.done.len();
        let (name, title) = STEPS[index];
        let verdict = if failed || checks.iter().any(|c| !c.pass) {
            StepVerdict::Fail
        } else {
            StepVerdict::Pass
        };
        let mut line = format!("[{}/7] {name}: {} — {message}", index + 1, verdict.label());
        for c in checks.iter().filter(|c| !c.pass) {
            line.push_str(&format!(
                "; {} wants {}, measured {}",
                c.threshold, c.wanted, c.measured
            ));
        }
        (self.progress)(&line);
        self.done.push(StepReport {
            index: index as u8 + 1,
            name: name.into(),
            title: title.into(),
            verdict,
            message,
            seconds: started.elapsed().as_secs_f64(),
            measurements,
            checks,
        });
        verdict == StepVerdict::Pass
    }

    /// Records the next step as failed with `message` and nothing measured, and skips the rest because
    /// the step named `step` failed.
    pub(crate) fn fail_rest(&mut self, started: Instant, message: String, step: &str) {
        self.finish(started, message, Value::Null, vec![], true);
        self.skip_rest(&format!("the {step} step failed"));
    }

    /// Records every step not yet done as skipped, with `why`.
    pub(crate) fn skip_rest(&mut self, why: &str) {
        while self.done.len() < STEPS.len() {
            let index = self.done.len();
            let (name, title) = STEPS[index];
            (self.progress)(&format!("[{}/7] {name}: SKIPPED — {why}", index + 1));
            self.done.push(StepReport {
                index: index as u8 + 1,
                name: name.into(),
                title: title.into(),
                verdict: StepVerdict::Skipped,
                message: why.into(),
                seconds: 0.0,
                measurements: Value::Null,
                checks: Vec::new(),
            });
        }
    }

    /// Prints a note between the step lines.
    pub(crate) fn note(&mut self, line: &str) {
        (self.progress)(line);
    }
}

/// `v` in `unit` as the report shows it everywhere; a unit that is neither a time nor a rate is the
/// plan's currency (the cost threshold).
fn human(v: f64, unit: &str) -> String {
    crate::units::quantity(v, unit, unit)
}

/// `measured ≤ max` when the plan sets `max` (the field path `threshold`).
pub(crate) fn check_max(
    threshold: &str,
    max: Option<f64>,
    measured: f64,
    unit: &str,
) -> Option<ThresholdCheck> {
    max.map(|m| ThresholdCheck {
        threshold: threshold.into(),
        wanted: format!("≤ {}", human(m, unit)),
        measured: human(measured, unit),
        pass: measured <= m,
    })
}

/// `measured ≥ min` when the plan sets `min` (the field path `threshold`).
pub(crate) fn check_min(
    threshold: &str,
    min: Option<f64>,
    measured: f64,
    unit: &str,
) -> Option<ThresholdCheck> {
    min.map(|m| ThresholdCheck {
        threshold: threshold.into(),
        wanted: format!("≥ {}", human(m, unit)),
        measured: human(measured, unit),
        pass: measured >= m,
    })
}

/// The report of a run of `plan` in `mode` (`local`, `cluster`) before any step, with `versions`
/// (`kubetrain` and `reportFormat` are added).
pub(crate) fn new_report(plan: &Plan, mode: &str, mut versions: Value) -> Report {
    let started_unix = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if let Value::Object(v) = &mut versions {
        v.insert("kubetrain".into(), json!(env!("CARGO_PKG_VERSION")));
        v.insert("reportFormat".into(), json!("v1"));
    }
    Report {
        format: "kubetrain.io/acceptance-report/v1".into(),
        name: plan.metadata.name.clone(),
        mode: mode.into(),
        passed: false,
        started_unix,
        seconds: 0.0,
        versions,
        host: Host::this_machine(),
        steps: Vec::new(),
        training: Vec::new(),
        events: Vec::new(),
        benchmark: Vec::new(),
        staging: Vec::new(),
        queue_wait_seconds: None,
        interrupted: false,
        cost: None,
        checkpoint_advice: None,
        labels: BTreeMap::new(),
        plan: plan.clone(),
    }
}

/// The report once the steps are done: passed only when all seven passed, the run's wall time and the
/// result label.
pub(crate) fn conclude(mut report: Report, steps: Vec<StepReport>, started: Instant) -> Report {
    report.passed =
        steps.len() == STEPS.len() && steps.iter().all(|s| s.verdict == StepVerdict::Pass);
    report.steps = steps;
    report.seconds = started.elapsed().as_secs_f64();
    report.labels.insert(
        "kubetrain.io/acceptance-result".into(),
        if report.passed {
            "passed".into()
        } else {
            "failed".into()
        },
    );
    report
}
