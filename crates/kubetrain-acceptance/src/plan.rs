//! The acceptance plan: what to run, where the data and checkpoints are, what a pass is.
//!
//! Read with [`Plan::from_yaml`], which returns every problem at once as a [`PlanFieldError`] with the
//! field path (`spec.thresholds.maxQueueWait: ...`), like the rest of kubetrain. Durations are
//! strings (`500ms`, `30s`, `5m`, `1h`; a bare number is seconds); sizes are bytes or `K`/`Ki`,
//! `M`/`Mi`, `G`/`Gi` (binary multiples).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `apiVersion` of a plan.
pub const API_VERSION: &str = "kubetrain.io/v1alpha1";
/// `kind` of a plan.
pub const KIND: &str = "AcceptancePlan";

/// Largest `spec.benchmark.maxBytes` (32Gi): beyond the largest sizes nccl-tests are run with.
const MAX_BENCH_BYTES: u64 = 32 << 30;
/// Largest `spec.benchmark.iters` and `warmup` per message size.
const MAX_ITERS: u64 = 10_000;
/// Largest `spec.training.samplesPerStep` (10⁹): steps × samples stays far from overflowing.
const MAX_SAMPLES_PER_STEP: u64 = 1_000_000_000;
/// Largest `spec.checkpoint.everySteps`.
const MAX_EVERY_STEPS: u64 = 1_000_000_000;
/// Largest `spec.checkpoint.keep` and `spec.podDeletion.afterCheckpoints`.
const MAX_CHECKPOINTS: u64 = 1000;
/// Largest `spec.cost.gpusPerNode`.
const MAX_GPUS_PER_NODE: u64 = 64;
/// Most bytes a plan's loopback sources generate, each (4Gi).
const MAX_LOOPBACK_BYTES: u64 = 4 << 30;
/// Largest price or per-run cost.
const MAX_PRICE: f64 = 1e9;
/// Largest `spec.checkpoint.interruptionRatePerNodeHour` (ten per node-hour: no training survives more).
const MAX_INTERRUPTION_RATE: f64 = 10.0;

fn bound(path: &str, message: String) -> PlanFieldError {
    PlanFieldError {
        path: path.into(),
        message,
    }
}

/// One problem of a plan: where, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanFieldError {
    /// Field path, e.g. `spec.training.window`.
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for PlanFieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanErrors(pub Vec<PlanFieldError>);

impl fmt::Display for PlanErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self
            .0
            .iter()
            .map(|e| format!("AcceptancePlan: {e}"))
            .collect();
        f.write_str(&lines.join("\n"))
    }
}

impl std::error::Error for PlanErrors {}

/// The plan document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plan {
    /// `kubetrain.io/v1alpha1`.
    pub api_version: String,
    /// `AcceptancePlan`.
    pub kind: String,
    /// Name (the default report directory is `acceptance-<name>`).
    pub metadata: Metadata,
    /// What to do.
    pub spec: Spec,
}

/// `metadata`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// Plan name: a DNS label.
    pub name: String,
}

/// `spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    /// The TrainJob under test, inline (its trainer command is the production command).
    pub train_job: Value,
    /// Runtimes the TrainJob may name besides the built-in ones (inline documents).
    #[serde(default)]
    pub runtimes: Vec<Value>,
    /// The queue it is submitted through.
    #[serde(default)]
    pub queue: QueueSpec,
    /// The dataset sample to stage.
    pub dataset: StorageSpec,
    /// The base model weights to stage.
    pub model: StorageSpec,
    /// The communication benchmark run in the job's pods.
    #[serde(default)]
    pub benchmark: BenchmarkSpec,
    /// The training window.
    pub training: TrainingSpec,
    /// Checkpoints of the trainer.
    pub checkpoint: CheckpointSpec,
    /// The pod deleted during training.
    pub pod_deletion: PodDeletionSpec,
    /// Labels exported with the results (merged with the measured ones).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Cost inputs.
    pub cost: CostSpec,
    /// What the useful work would cost elsewhere.
    pub baseline: BaselineSpec,
    /// Pass/fail thresholds.
    pub thresholds: Thresholds,
    /// Cluster mode (`--kubeconfig`): how long a step may wait on the cluster.
    #[serde(default)]
    pub cluster: ClusterSpec,
}

/// `spec.cluster`: settings of the cluster mode only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// The longest a step waits for the cluster (initializers, benchmark pods, the training job's
    /// admission and end beyond its window); the queue wait is bounded by `maxQueueWait` when set.
    #[serde(default = "default_step_timeout")]
    pub step_timeout: Dur,
}

fn default_step_timeout() -> Dur {
    Dur(Duration::from_secs(30 * 60))
}

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec {
            step_timeout: default_step_timeout(),
        }
    }
}

/// `spec.queue`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueSpec {
    /// Kueue LocalQueue name (cluster: the `kueue.x-k8s.io/queue-name` label); locally informational.
    #[serde(default)]
    pub name: Option<String>,
    /// Local mode: the local queue's ledger directory (default: the user's shared one, so the run
    /// queues behind other `kubetrain run`s).
    #[serde(default)]
    pub dir: Option<String>,
    /// Local mode: the queue's capacity (`cpu`, `memory`, `gpu`), default this machine.
    #[serde(default)]
    pub capacity: BTreeMap<String, String>,
}

/// `spec.dataset` / `spec.model`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageSpec {
    /// `s3://bucket/prefix` or `hf://org/name`.
    pub uri: String,
    /// S3-compatible endpoint (`http://minio:9000`).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Local mode: serve generated files from a loopback S3 server instead of a real one.
    #[serde(default)]
    pub loopback: Option<LoopbackSpec>,
}

/// Generated content of a loopback source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoopbackSpec {
    /// Number of files.
    pub files: u32,
    /// Size of each file.
    pub file_size: Size,
}

/// `spec.benchmark`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BenchmarkSpec {
    /// Smallest all-reduce size.
    #[serde(default = "default_min_bytes")]
    pub min_bytes: Size,
    /// Largest all-reduce size (busbw is judged here).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: Size,
    /// Timed iterations per size.
    #[serde(default = "default_iters")]
    pub iters: u32,
    /// Warm-up iterations per size.
    #[serde(default = "default_warmup")]
    pub warmup: u32,
    /// `cpu` or `nccl`.
    #[serde(default = "default_backend")]
    pub backend: String,
}

fn default_min_bytes() -> Size {
    Size(8)
}
fn default_max_bytes() -> Size {
    Size(4 << 20)
}
fn default_iters() -> u32 {
    10
}
fn default_warmup() -> u32 {
    2
}
fn default_backend() -> String {
    "cpu".into()
}

impl Default for BenchmarkSpec {
    fn default() -> Self {
        BenchmarkSpec {
            min_bytes: default_min_bytes(),
            max_bytes: default_max_bytes(),
            iters: default_iters(),
            warmup: default_warmup(),
            backend: default_backend(),
        }
    }
}

/// `spec.training`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrainingSpec {
    /// How long to train after the restore (the window before the deletion is `deleteAfter`).
    pub window: Dur,
    /// Samples per step over all ranks (for throughput: samples/s = samples per step × steps/s).
    pub samples_per_step: u64,
    /// Extra time per step for the demo trainer (`KUBETRAIN_STEP_DELAY_MS`), standing in for compute.
    #[serde(default)]
    pub step_delay: Option<Dur>,
}

/// `spec.checkpoint`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointSpec {
    /// A directory (relative: to the report directory) or `s3://bucket/prefix`.
    pub location: String,
    /// Steps between checkpoints.
    pub every_steps: u64,
    /// Checkpoints kept.
    #[serde(default = "default_keep")]
    pub keep: u32,
    /// Interruptions (spot reclaims, lost nodes) per node-hour of the capacity the job will run on, in
    /// `(0, 10]`: with it the report carries `checkpointAdvice`, the interval that costs least
    /// ([`crate::checkpoint_advice`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption_rate_per_node_hour: Option<f64>,
}

fn default_keep() -> u32 {
    3
}

/// `spec.podDeletion`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodDeletionSpec {
    /// Index of the trainer pod to delete (its node rank).
    pub pod_index: u32,
    /// Delete it once this many checkpoints were written.
    pub after_checkpoints: u32,
    /// Fault injection: damage the newest checkpoint right after the deletion, to prove a damaged
    /// checkpoint is skipped, never loaded (the restore step then fails: it resumed from an older one).
    #[serde(default)]
    pub corrupt_newest_checkpoint: bool,
}

/// `spec.cost`: prices and per-run costs, in one currency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CostSpec {
    /// Currency, for display (`USD`).
    #[serde(default = "default_currency")]
    pub currency: String,
    /// Price of one GPU-hour.
    #[serde(default)]
    pub gpu_hour: f64,
    /// GPUs per node (GPU-hours = nodes × this × hours).
    #[serde(default)]
    pub gpus_per_node: u32,
    /// Price of one node-hour (CPU, memory, the machine around the GPUs).
    #[serde(default)]
    pub node_hour: f64,
    /// Network cost per run.
    #[serde(default)]
    pub network_per_run: f64,
    /// Storage cost per run.
    #[serde(default)]
    pub storage_per_run: f64,
    /// Support cost per run.
    #[serde(default)]
    pub support_per_run: f64,
    /// Operations (people, tooling) cost per run.
    #[serde(default)]
    pub operations_per_run: f64,
    /// Share of reserved capacity that sits idle (0..1): idle = compute × share / (1 − share).
    #[serde(default)]
    pub idle_share: f64,
    /// The accepted workload unit.
    pub unit: UnitSpec,
}

fn default_currency() -> String {
    "USD".into()
}

/// `spec.cost.unit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnitSpec {
    /// Display name (`1M training samples`).
    pub name: String,
    /// Samples per unit.
    pub samples: u64,
}

/// `spec.baseline`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BaselineSpec {
    /// What it is (`rented A100 at list price`, `fine-tuning API`).
    pub name: String,
    /// Its price per accepted unit.
    pub price_per_unit: f64,
}

/// `spec.thresholds`: every one set must hold for exit code 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Thresholds {
    /// Longest acceptable queue wait (the run stops when admission takes longer).
    #[serde(default)]
    pub max_queue_wait: Option<Dur>,
    /// Lowest acceptable staging throughput, MB/s (10^6 bytes).
    #[serde(default)]
    pub min_staging_mbps: Option<f64>,
    /// Lowest acceptable all-reduce busbw at the largest size, GB/s.
    #[serde(default)]
    pub min_busbw_gbps: Option<f64>,
    /// Lowest acceptable training throughput.
    #[serde(default)]
    pub min_samples_per_second: Option<f64>,
    /// Longest acceptable time from the pod deletion to the first step trained after it.
    #[serde(default)]
    pub max_restore_time: Option<Dur>,
    /// Highest acceptable effective cost per unit.
    #[serde(default)]
    pub max_cost_per_unit: Option<f64>,
}

/// A duration written `500ms`, `30s`, `5m`, `1h` or a bare number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        let text = match &v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(serde::de::Error::custom(format!(
                    "expected a duration like \"30s\", got {other}"
                )));
            }
        };
        parse_duration(&text)
            .map(Dur)
            .map_err(serde::de::Error::custom)
    }
}

/// Parses `500ms`, `30s`, `5m`, `1h` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * scale < 1e9 => {
            Ok(Duration::from_secs_f64(v * scale))
        }
        _ => Err(DurationError(text.to_string())),
    }
}

/// A text [`parse_duration`] cannot read (the text as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a duration: write e.g. \"500ms\", \"30s\", \"5m\" or \"1h\"")]
pub struct DurationError(pub String);

/// A text [`parse_size`] cannot read (the text as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a size: write bytes, or a number with Ki, Mi or Gi")]
pub struct SizeError(pub String);

/// `1.5s`, `250ms`, `2m30s`.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{}ms", d.as_millis())
    } else if s < 60.0 || d.subsec_millis() != 0 {
        format!("{}s", trim_float(s))
    } else {
        format!("{}s", d.as_secs())
    }
}

fn trim_float(v: f64) -> String {
    let t = format!("{v:.3}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A size in bytes, written `4096`, `64K`, `64Ki`, `4M`, `1Gi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl Serialize for Size {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        let text = match &v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(serde::de::Error::custom(format!(
                    "expected a size like \"4Mi\", got {other}"
                )));
            }
        };
        parse_size(&text)
            .map(Size)
            .map_err(serde::de::Error::custom)
    }
}

/// Parses `4096`, `64K`, `64Ki`, `4M`, `1Gi` (binary multiples).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let t = t.strip_suffix('i').unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| SizeError(text.to_string()))
}

impl Plan {
    /// Reads and validates a plan; every problem comes back with its field path.
    pub fn from_yaml(text: &str) -> Result<Plan, PlanErrors> {
        let value: Value = serde_saphyr::from_str(text).map_err(|e| {
            PlanErrors(vec![PlanFieldError {
                path: "(document)".into(),
                message: format!("not valid YAML: {e}"),
            }])
        })?;
        let plan: Plan = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            PlanErrors(vec![PlanFieldError {
                path: if path == "." {
                    "(document)".into()
                } else {
                    path
                },
                message: inner,
            }])
        })?;
        let errors = plan.validate();
        if errors.is_empty() {
            Ok(plan)
        } else {
            Err(PlanErrors(errors))
        }
    }

    /// Checks what the types cannot: names, ranges, URIs, the TrainJob's shape.
    pub fn validate(&self) -> Vec<PlanFieldError> {
        let mut errs = Vec::new();
        self.check_identity(&mut errs);
        self.check_job_and_sources(&mut errs);
        self.check_steps(&mut errs);
        self.check_cost_and_thresholds(&mut errs);
        errs.extend(self.check_locations());
        errs.extend(self.check_bounds());
        errs
    }

    /// `apiVersion`, `kind` and `metadata.name`.
    fn check_identity(&self, errs: &mut Vec<PlanFieldError>) {
        let mut err = |path: &str, message: String| {
            errs.push(PlanFieldError {
                path: path.into(),
                message,
            })
        };
        if self.api_version != API_VERSION {
            err(
                "apiVersion",
                format!("must be {API_VERSION:?}, got {:?}", self.api_version),
            );
        }
        if self.kind != KIND {
            err("kind", format!("must be {KIND:?}, got {:?}", self.kind));
        }
        let n = &self.metadata.name;
        if n.is_empty()
            || n.len() > 63
            || !n
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            || n.starts_with('-')
            || n.ends_with('-')
        {
            err(
                "metadata.name",
                format!("{n:?} is not a DNS label: lowercase letters, digits and '-', at most 63"),
            );
        }
    }

    /// The TrainJob's kind and command; the dataset and model sources.
    fn check_job_and_sources(&self, errs: &mut Vec<PlanFieldError>) {
        let mut err = |path: &str, message: String| {
            errs.push(PlanFieldError {
                path: path.into(),
                message,
            })
        };
        let tj = &self.spec.train_job;
        if tj.get("kind").and_then(Value::as_str) != Some("TrainJob") {
            err(
                "spec.trainJob.kind",
                "must be \"TrainJob\" (the job under test, inline)".into(),
            );
        }
        if tj.pointer("/spec/trainer/command").is_none() {
            err(
                "spec.trainJob.spec.trainer.command",
                "is required: the production command the acceptance test trains with".into(),
            );
        }
        for (path, s) in [
            ("spec.dataset", &self.spec.dataset),
            ("spec.model", &self.spec.model),
        ] {
            if !(s.uri.starts_with("s3://") || s.uri.starts_with("hf://")) {
                err(
                    &format!("{path}.uri"),
                    format!("{:?} must start with s3:// or hf://", s.uri),
                );
            }
            if s.loopback.is_some() && !s.uri.starts_with("s3://") {
                err(
                    &format!("{path}.loopback"),
                    "a loopback source serves s3:// only: use an s3:// uri".into(),
                );
            }
            if let Some(l) = &s.loopback {
                if l.files == 0 || l.files > 1000 {
                    err(
                        &format!("{path}.loopback.files"),
                        format!("{} must be 1..=1000", l.files),
                    );
                }
                if l.file_size.0 == 0 || l.file_size.0 > 1 << 30 {
                    err(
                        &format!("{path}.loopback.fileSize"),
                        format!("{} bytes must be 1 byte..1Gi", l.file_size.0),
                    );
                }
            }
        }
    }

    /// The benchmark, the training window, the checkpoints and the pod deletion.
    fn check_steps(&self, errs: &mut Vec<PlanFieldError>) {
        let mut err = |path: &str, message: String| {
            errs.push(PlanFieldError {
                path: path.into(),
                message,
            })
        };
        let nodes = self
            .spec
            .train_job
            .pointer("/spec/trainer/numNodes")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        let b = &self.spec.benchmark;
        if b.min_bytes.0 == 0 || b.min_bytes.0 > b.max_bytes.0 {
            err(
                "spec.benchmark.minBytes",
                format!(
                    "{} must be at least 1 and at most maxBytes ({})",
                    b.min_bytes.0, b.max_bytes.0
                ),
            );
        }
        if b.iters == 0 {
            err("spec.benchmark.iters", "must be at least 1".into());
        }
        if b.backend != "cpu" && b.backend != "nccl" {
            err(
                "spec.benchmark.backend",
                format!("{:?} must be \"cpu\" or \"nccl\"", b.backend),
            );
        }
        let t = &self.spec.training;
        if t.window.0.is_zero() {
            err("spec.training.window", "must be longer than 0s".into());
        }
        if t.samples_per_step == 0 {
            err("spec.training.samplesPerStep", "must be at least 1".into());
        }
        let c = &self.spec.checkpoint;
        if c.location.trim().is_empty() {
            err(
                "spec.checkpoint.location",
                "is required: a directory or s3://bucket/prefix".into(),
            );
        }
        if c.location.contains("://") && !c.location.starts_with("s3://") {
            err(
                "spec.checkpoint.location",
                format!("{:?}: only directories and s3:// are supported", c.location),
            );
        }
        if c.every_steps == 0 {
            err("spec.checkpoint.everySteps", "must be at least 1".into());
        }
        if c.keep == 0 {
            err(
                "spec.checkpoint.keep",
                "must be at least 1 (0 would keep nothing to restore)".into(),
            );
        }
        if let Some(rate) = c.interruption_rate_per_node_hour
            && !(rate > 0.0 && rate <= MAX_INTERRUPTION_RATE)
        {
            err(
                "spec.checkpoint.interruptionRatePerNodeHour",
                format!(
                    "{rate} must be in (0, {MAX_INTERRUPTION_RATE}] interruptions per node-hour \
(e.g. 0.05: one spot reclaim per 20 node-hours); leave it out for no checkpoint advice"
                ),
            );
        }
        let d = &self.spec.pod_deletion;
        if u64::from(d.pod_index) >= nodes {
            err(
                "spec.podDeletion.podIndex",
                format!(
                    "{} is not a trainer pod: the TrainJob has {nodes} (0..{nodes})",
                    d.pod_index
                ),
            );
        }
        if d.after_checkpoints == 0 {
            err(
                "spec.podDeletion.afterCheckpoints",
                "must be at least 1: a deletion before any checkpoint cannot prove a restore"
                    .into(),
            );
        }
    }

    /// Prices, the idle share, the unit, the thresholds and the labels.
    fn check_cost_and_thresholds(&self, errs: &mut Vec<PlanFieldError>) {
        let mut err = |path: &str, message: String| {
            errs.push(PlanFieldError {
                path: path.into(),
                message,
            })
        };
        let cost = &self.spec.cost;
        for (path, v) in [
            ("spec.cost.gpuHour", cost.gpu_hour),
            ("spec.cost.nodeHour", cost.node_hour),
            ("spec.cost.networkPerRun", cost.network_per_run),
            ("spec.cost.storagePerRun", cost.storage_per_run),
            ("spec.cost.supportPerRun", cost.support_per_run),
            ("spec.cost.operationsPerRun", cost.operations_per_run),
            (
                "spec.baseline.pricePerUnit",
                self.spec.baseline.price_per_unit,
            ),
        ] {
            if !v.is_finite() || v < 0.0 {
                err(path, format!("{v} must be a number ≥ 0"));
            }
        }
        if !(0.0..1.0).contains(&cost.idle_share) {
            err(
                "spec.cost.idleShare",
                format!("{} must be in [0, 1)", cost.idle_share),
            );
        }
        if cost.unit.samples == 0 {
            err("spec.cost.unit.samples", "must be at least 1".into());
        }
        let th = &self.spec.thresholds;
        for (path, v) in [
            ("spec.thresholds.minStagingMbps", th.min_staging_mbps),
            ("spec.thresholds.minBusbwGbps", th.min_busbw_gbps),
            (
                "spec.thresholds.minSamplesPerSecond",
                th.min_samples_per_second,
            ),
            ("spec.thresholds.maxCostPerUnit", th.max_cost_per_unit),
        ] {
            if let Some(v) = v
                && (!v.is_finite() || v < 0.0)
            {
                err(path, format!("{v} must be a number ≥ 0"));
            }
        }
        for (k, v) in &self.spec.labels {
            if k.is_empty() || k.len() > 63 + 254 || v.len() > 63 {
                err(
                    &format!("spec.labels.{k}"),
                    "label keys are at most 317 characters (prefix/name), values at most 63".into(),
                );
            }
        }
    }

    /// Paths the run writes to that are relative must stay inside its directory once `..` is resolved:
    /// the checkpoint location, and where a loopback source's files are generated (bucket/prefix).
    fn check_locations(&self) -> Vec<PlanFieldError> {
        let mut errs = Vec::new();
        let c = &self.spec.checkpoint.location;
        if !c.trim().is_empty()
            && !c.contains("://")
            && !std::path::Path::new(c).is_absolute()
            && let Err(e) = crate::outdir::resolve_inside(c)
        {
            errs.push(PlanFieldError {
                path: "spec.checkpoint.location".into(),
                message: e,
            });
        }
        for (path, s) in [
            ("spec.dataset.uri", &self.spec.dataset),
            ("spec.model.uri", &self.spec.model),
        ] {
            if let (Some(_), Some(rest)) = (&s.loopback, s.uri.strip_prefix("s3://"))
                && let Err(e) = crate::outdir::resolve_inside(rest)
            {
                errs.push(PlanFieldError {
                    path: path.into(),
                    message: format!(
                        "a loopback source's files are generated under the run directory at bucket/prefix: {e}"
                    ),
                });
            }
        }
        errs
    }

    /// Upper bounds, so that no value overflows or keeps the run going for ever.
    fn check_bounds(&self) -> Vec<PlanFieldError> {
        let mut errs = Vec::new();
        self.check_duration_bounds(&mut errs);
        self.check_count_bounds(&mut errs);
        self.check_size_and_price_bounds(&mut errs);
        errs.extend(self.check_capacity());
        errs
    }

    /// Durations at most 24h; the step delay at most the window.
    fn check_duration_bounds(&self, errs: &mut Vec<PlanFieldError>) {
        let spec = &self.spec;
        let day = Duration::from_secs(24 * 3600);
        for (path, d) in [
            ("spec.training.window", Some(spec.training.window)),
            (
                "spec.thresholds.maxQueueWait",
                spec.thresholds.max_queue_wait,
            ),
            (
                "spec.thresholds.maxRestoreTime",
                spec.thresholds.max_restore_time,
            ),
            ("spec.cluster.stepTimeout", Some(spec.cluster.step_timeout)),
        ] {
            if let Some(d) = d
                && d.0 > day
            {
                errs.push(bound(
                    path,
                    format!("{} is over the limit of 24h (86400s)", format_duration(d.0)),
                ));
            }
        }
        if let Some(d) = spec.training.step_delay
            && d.0 > spec.training.window.0
        {
            errs.push(bound(
                "spec.training.stepDelay",
                format!(
                    "{} is longer than spec.training.window ({}): not one step would finish in the window",
                    format_duration(d.0),
                    format_duration(spec.training.window.0)
                ),
            ));
        }
    }

    /// Counts and sizes of the benchmark, the training and the checkpoints.
    fn check_count_bounds(&self, errs: &mut Vec<PlanFieldError>) {
        let spec = &self.spec;
        let counts: [(&str, u64, u64); 8] = [
            (
                "spec.benchmark.maxBytes",
                spec.benchmark.max_bytes.0,
                MAX_BENCH_BYTES,
            ),
            (
                "spec.benchmark.iters",
                spec.benchmark.iters.into(),
                MAX_ITERS,
            ),
            (
                "spec.benchmark.warmup",
                spec.benchmark.warmup.into(),
                MAX_ITERS,
            ),
            (
                "spec.training.samplesPerStep",
                spec.training.samples_per_step,
                MAX_SAMPLES_PER_STEP,
            ),
            (
                "spec.checkpoint.everySteps",
                spec.checkpoint.every_steps,
                MAX_EVERY_STEPS,
            ),
            (
                "spec.checkpoint.keep",
                spec.checkpoint.keep.into(),
                MAX_CHECKPOINTS,
            ),
            (
                "spec.podDeletion.afterCheckpoints",
                spec.pod_deletion.after_checkpoints.into(),
                MAX_CHECKPOINTS,
            ),
            (
                "spec.cost.gpusPerNode",
                spec.cost.gpus_per_node.into(),
                MAX_GPUS_PER_NODE,
            ),
        ];
        for (path, v, max) in counts {
            if v > max {
                errs.push(bound(path, format!("{v} is over the limit of {max}")));
            }
        }
    }

    /// What a loopback source generates, and prices.
    fn check_size_and_price_bounds(&self, errs: &mut Vec<PlanFieldError>) {
        let spec = &self.spec;
        for (path, s) in [("spec.dataset", &spec.dataset), ("spec.model", &spec.model)] {
            if let Some(l) = &s.loopback {
                let total = u64::from(l.files).saturating_mul(l.file_size.0);
                if total > MAX_LOOPBACK_BYTES {
                    errs.push(bound(
                        &format!("{path}.loopback"),
                        format!(
                            "files × fileSize = {total} bytes is over the limit of 4Gi generated on this machine's disk"
                        ),
                    ));
                }
            }
        }
        let cost = &spec.cost;
        for (path, v) in [
            ("spec.cost.gpuHour", cost.gpu_hour),
            ("spec.cost.nodeHour", cost.node_hour),
            ("spec.cost.networkPerRun", cost.network_per_run),
            ("spec.cost.storagePerRun", cost.storage_per_run),
            ("spec.cost.supportPerRun", cost.support_per_run),
            ("spec.cost.operationsPerRun", cost.operations_per_run),
            ("spec.baseline.pricePerUnit", spec.baseline.price_per_unit),
        ] {
            if v.is_finite() && v > MAX_PRICE {
                errs.push(bound(path, format!("{v} is over the limit of 1e9")));
            }
        }
    }

    /// `spec.queue.capacity`: known resources with readable, non-zero amounts (a zero capacity would
    /// never admit the job).
    fn check_capacity(&self) -> Vec<PlanFieldError> {
        let mut errs = Vec::new();
        for (k, v) in &self.spec.queue.capacity {
            let path = format!("spec.queue.capacity.{k}");
            let amount = match k.as_str() {
                "cpu" | "gpu" => v
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| format!("{v:?} is not a whole number of {k}s")),
                "memory" => parse_size(v).map_err(|e| e.to_string()),
                _ => Err(format!("unknown resource {k:?}: cpu, memory or gpu")),
            };
            match amount {
                Err(e) => errs.push(bound(&path, e)),
                Ok(0) if k != "gpu" => errs.push(bound(
                    &path,
                    "must be at least 1: a queue of no capacity never admits the job".into(),
                )),
                Ok(_) => {}
            }
        }
        errs
    }

    /// The TrainJob's number of trainer pods.
    pub fn num_nodes(&self) -> u64 {
        self.spec
            .train_job
            .pointer("/spec/trainer/numNodes")
            .and_then(Value::as_u64)
            .unwrap_or(1)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const MINIMAL: &str = r#"
apiVersion: kubetrain.io/v1alpha1
kind: AcceptancePlan
metadata: {name: t}
spec:
  trainJob:
    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainJob
    metadata: {name: t}
    spec:
      runtimeRef: {name: torch-distributed}
      trainer: {numNodes: 2, command: [kubetrain, collective, train-demo]}
  dataset: {uri: s3://data/sample, loopback: {files: 2, fileSize: 1Ki}}
  model: {uri: s3://models/base, loopback: {files: 1, fileSize: 2Ki}}
  training: {window: 2s, samplesPerStep: 1024}
  checkpoint: {location: ckpt, everySteps: 5}
  podDeletion: {podIndex: 1, afterCheckpoints: 1}
  cost: {nodeHour: 0.2, unit: {name: 1M samples, samples: 1000000}}
  baseline: {name: rented GPU, pricePerUnit: 1.5}
  thresholds: {maxQueueWait: 30s}
"#;

    #[test]
    fn a_minimal_plan_reads_with_defaults() {
        let p = Plan::from_yaml(MINIMAL).unwrap();
        assert_eq!(p.spec.benchmark.max_bytes, Size(4 << 20));
        assert_eq!(p.spec.checkpoint.keep, 3);
        assert_eq!(
            p.spec.thresholds.max_queue_wait,
            Some(Dur(Duration::from_secs(30)))
        );
        assert_eq!(p.num_nodes(), 2);
    }

    #[test]
    fn errors_name_the_field_path() {
        let cases = [
            (
                "maxQueueWait: 30s",
                "maxQueueWait: soon",
                "spec.thresholds.maxQueueWait",
                "not a duration",
            ),
            (
                "everySteps: 5",
                "everySteps: 5, every: 3",
                "spec.checkpoint.every",
                "unknown field `every`",
            ),
            (
                "podIndex: 1",
                "podIndex: 2",
                "spec.podDeletion.podIndex",
                "has 2",
            ),
            (
                "afterCheckpoints: 1",
                "afterCheckpoints: 0",
                "spec.podDeletion.afterCheckpoints",
                "at least 1",
            ),
            (
                "uri: s3://data/sample",
                "uri: ftp://x",
                "spec.dataset.uri",
                "s3:// or hf://",
            ),
            (
                "fileSize: 1Ki",
                "fileSize: lots",
                "spec.dataset.loopback.fileSize",
                "not a size",
            ),
            (
                "location: ckpt",
                "location: gs://b/x",
                "spec.checkpoint.location",
                "only directories and s3://",
            ),
            (
                "pricePerUnit: 1.5",
                "pricePerUnit: -1",
                "spec.baseline.pricePerUnit",
                "≥ 0",
            ),
            (
                "name: t}\nspec",
                "name: T_1}\nspec",
                "metadata.name",
                "DNS label",
            ),
        ];
        for (from, to, path, want) in cases {
            assert!(MINIMAL.contains(from), "{from}");
            let text = MINIMAL.replacen(from, to, 1);
            let errs = Plan::from_yaml(&text).unwrap_err();
            assert!(
                errs.0
                    .iter()
                    .any(|e| e.path == path && e.message.contains(want)),
                "{to}: {errs}"
            );
        }
    }

    /// Values that would overflow, never finish or write outside the run directory: refused before
    /// anything starts, each with its field path.
    /// Bad plans: (what MINIMAL says, what the bad plan says instead, the error's path, a part of its message).
    const BAD_PLANS: [(&str, &str, &str, &str); 26] = [
        (
            "location: ckpt",
            "location: ../ckpt",
            "spec.checkpoint.location",
            "leaves the run directory",
        ),
        (
            "location: ckpt",
            "location: a/../../ckpt",
            "spec.checkpoint.location",
            "leaves the run directory",
        ),
        (
            "location: ckpt",
            "location: .",
            "spec.checkpoint.location",
            "names the run directory itself",
        ),
        (
            "uri: s3://data/sample",
            "uri: s3://data/../../x",
            "spec.dataset.uri",
            "leaves the run directory",
        ),
        (
            "window: 2s",
            "window: 25h",
            "spec.training.window",
            "over the limit of 24h",
        ),
        (
            "window: 2s",
            "window: 2s, stepDelay: 1h",
            "spec.training.stepDelay",
            "longer than spec.training.window",
        ),
        (
            "maxQueueWait: 30s",
            "maxQueueWait: 99999999",
            "spec.thresholds.maxQueueWait",
            "over the limit of 24h",
        ),
        (
            "maxQueueWait: 30s",
            "maxRestoreTime: 2000h",
            "spec.thresholds.maxRestoreTime",
            "over the limit of 24h",
        ),
        (
            "baseline:",
            "cluster: {stepTimeout: 48h}\n  baseline:",
            "spec.cluster.stepTimeout",
            "over the limit of 24h",
        ),
        (
            "samplesPerStep: 1024",
            "samplesPerStep: 18446744073709551615",
            "spec.training.samplesPerStep",
            "over the limit",
        ),
        (
            "everySteps: 5",
            "everySteps: 18446744073709551615",
            "spec.checkpoint.everySteps",
            "over the limit",
        ),
        (
            "everySteps: 5",
            "everySteps: 5, keep: 4294967295",
            "spec.checkpoint.keep",
            "over the limit of 1000",
        ),
        (
            "everySteps: 5",
            "everySteps: 5, interruptionRatePerNodeHour: 0",
            "spec.checkpoint.interruptionRatePerNodeHour",
            "must be in (0, 10]",
        ),
        (
            "everySteps: 5",
            "everySteps: 5, interruptionRatePerNodeHour: 11",
            "spec.checkpoint.interruptionRatePerNodeHour",
            "must be in (0, 10]",
        ),
        (
            "afterCheckpoints: 1",
            "afterCheckpoints: 4294967295",
            "spec.podDeletion.afterCheckpoints",
            "over the limit of 1000",
        ),
        (
            "thresholds:",
            "benchmark: {maxBytes: 16777216Gi}\n  thresholds:",
            "spec.benchmark.maxBytes",
            "over the limit",
        ),
        (
            "thresholds:",
            "benchmark: {iters: 4294967295}\n  thresholds:",
            "spec.benchmark.iters",
            "over the limit of 10000",
        ),
        (
            "thresholds:",
            "benchmark: {warmup: 4294967295}\n  thresholds:",
            "spec.benchmark.warmup",
            "over the limit of 10000",
        ),
        (
            "nodeHour: 0.2",
            "nodeHour: 0.2, gpusPerNode: 4294967295",
            "spec.cost.gpusPerNode",
            "over the limit of 64",
        ),
        (
            "nodeHour: 0.2",
            "nodeHour: 1e300",
            "spec.cost.nodeHour",
            "over the limit",
        ),
        (
            "pricePerUnit: 1.5",
            "pricePerUnit: 1e300",
            "spec.baseline.pricePerUnit",
            "over the limit",
        ),
        (
            "files: 2, fileSize: 1Ki",
            "files: 1000, fileSize: 1Gi",
            "spec.dataset.loopback",
            "over the limit of 4Gi",
        ),
        (
            "thresholds:",
            "queue: {capacity: {cpu: \"0\"}}\n  thresholds:",
            "spec.queue.capacity.cpu",
            "at least 1",
        ),
        (
            "thresholds:",
            "queue: {capacity: {cpu: lots}}\n  thresholds:",
            "spec.queue.capacity.cpu",
            "not a whole number",
        ),
        (
            "thresholds:",
            "queue: {capacity: {memory: \"0\"}}\n  thresholds:",
            "spec.queue.capacity.memory",
            "at least 1",
        ),
        (
            "thresholds:",
            "queue: {capacity: {gpus: \"8\"}}\n  thresholds:",
            "spec.queue.capacity.gpus",
            "unknown resource",
        ),
    ];

    #[test]
    fn bad_plans_are_refused_with_the_field_path() {
        for (from, to, path, want) in BAD_PLANS {
            assert!(MINIMAL.contains(from), "{from}");
            let text = MINIMAL.replacen(from, to, 1);
            let errs = Plan::from_yaml(&text).unwrap_err();
            assert!(
                errs.0
                    .iter()
                    .any(|e| e.path == path && e.message.contains(want)),
                "{to}: {errs}"
            );
        }
        // At the limits, the plan is valid.
        let text = MINIMAL
            .replacen("window: 2s", "window: 24h", 1)
            .replacen("location: ckpt", "location: a/../ckpt", 1)
            .replacen("afterCheckpoints: 1", "afterCheckpoints: 1000", 1);
        Plan::from_yaml(&text).unwrap();
    }

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(
            parse_duration("-1s").unwrap_err().to_string(),
            r#""-1s" is not a duration: write e.g. "500ms", "30s", "5m" or "1h""#
        );
        assert_eq!(parse_size("4Mi").unwrap(), 4 << 20);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(
            parse_size("1.5M").unwrap_err().to_string(),
            r#""1.5M" is not a size: write bytes, or a number with Ki, Mi or Gi"#
        );
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
    }
}
