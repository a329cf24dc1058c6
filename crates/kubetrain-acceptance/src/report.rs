//! The report: `acceptance.json` (every measurement, the plan, versions, host facts, one entry per step)
//! and a self-contained `acceptance.html` (inline SVG charts and a pass/fail table; no external files,
//! no network).

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
    /// The checkpoint interval that costs least, when the plan gives an interruption rate
    /// (`spec.checkpoint.interruptionRatePerNodeHour`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_advice: Option<crate::checkpoint_advice::Advice>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::render as html;

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
            checkpoint_advice: crate::checkpoint_advice::advise(
                &crate::checkpoint_advice::Inputs {
                    interruptions_per_node_hour: 0.05,
                    nodes: 2,
                    gpus_per_node: 8,
                    checkpoint_seconds: 30.0,
                    restart_seconds: 60.0,
                    current_interval_seconds: 600.0,
                    gpu_hour_price: 2.5,
                },
            )
            .ok(),
            labels: [("a".to_string(), "b".to_string())].into(),
            plan,
        }
    }

    #[test]
    fn checkpoint_advice_is_in_the_json_and_on_the_page() {
        let report = sample();
        let json = serde_json::to_value(&report).unwrap();
        let advice = &json["checkpointAdvice"];
        for key in [
            "currentIntervalSeconds",
            "optimalIntervalSeconds",
            "mtbfSeconds",
        ] {
            assert!(advice[key].is_f64(), "{key}: {advice}");
        }
        let lost = &advice["lostGpuHoursPerWeek"];
        assert!(lost["optimal"].as_f64().unwrap() <= lost["current"].as_f64().unwrap());
        let page = html(&report);
        assert!(
            page.contains("id=\"checkpoint-advice\""),
            "the advice table"
        );
        assert!(page.contains("GPU-hours lost per week"));
        // Without a rate in the plan the key is absent.
        let mut plain = report;
        plain.checkpoint_advice = None;
        assert!(
            serde_json::to_value(&plain)
                .unwrap()
                .get("checkpointAdvice")
                .is_none()
        );
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
        // Size ticks in binary units on powers of two.
        assert!(
            page.contains(">16 B</text>") && page.contains(">1 KiB</text>"),
            "size ticks"
        );
    }

    /// The page's text outside tags.
    fn visible_text(page: &str) -> String {
        page.split('<')
            .filter_map(|part| part.split_once('>').map(|(_, text)| text))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn the_page_has_human_units_full_width_charts_and_no_debug_text() {
        let page = html(&sample());
        let text = visible_text(&page);
        let bytes = text.as_bytes();
        let exponent = bytes.windows(3).any(|w| {
            w[0].is_ascii_digit()
                && (w[1] == b'e' || w[1] == b'E')
                && (w[2].is_ascii_digit() || w[2] == b'-' || w[2] == b'+')
        });
        assert!(!exponent, "no scientific notation: {text}");
        assert!(
            !page.contains("<script")
                && !page.contains("selfcheck")
                && !page.contains("not yet checked")
        );
        assert!(
            !text.contains("1048576") && text.contains("dataset (1 MiB)"),
            "sizes in binary units: {text}"
        );
        let svgs: Vec<&str> = page
            .split("<svg")
            .skip(1)
            .map(|s| s.split_once('>').unwrap().0)
            .collect();
        assert_eq!(svgs.len(), 7);
        for tag in svgs {
            assert!(
                tag.contains(r#"width="100%""#) && !tag.contains("height="),
                "{tag}"
            );
        }
        // The cost in fixed point with the plan's currency.
        let c = sample().cost.unwrap();
        assert!(
            text.contains(&crate::units::money(c.total, &c.currency)),
            "{text}"
        );
    }

    #[test]
    fn a_measurement_reads_the_same_in_its_check_and_in_the_message() {
        let mut r = sample();
        let check = crate::steps::check_max(
            "spec.thresholds.maxRestoreTime",
            Some(20.0),
            0.067_500_699,
            "s",
        );
        r.steps[0].checks.push(check.unwrap());
        let page = html(&r);
        // The restore message writes its time with the same function.
        assert_eq!(crate::units::duration(0.067_500_699), "68 ms");
        assert!(page.contains("≤ 20.00 s: measured 68 ms"), "{page}");
        assert!(
            !page.contains("0.068") && !page.contains("0.1 s"),
            "one value, one format"
        );
    }

    #[test]
    fn an_empty_chart_says_so() {
        let mut r = sample();
        r.benchmark.clear();
        assert!(html(&r).contains("no data"));
    }
}
