//! The `trainerStatus.metrics` names the acceptance test reads on a cluster, and how they become report
//! rows. The job's own pods post them to the operator's status server (the `KUBEFLOW_TRAINER_SERVER_*`
//! env of upstream's TrainJobStatus plugin); `kubetrain collective bench` and `kubetrain collective
//! train-demo` report exactly these, and a production trainer that reports the training ones (with any
//! client: Kubeflow's Python SDK `update_trainjob_status(metrics={...})` works) passes the same test.
//!
//! | name | reported by | value |
//! |---|---|---|
//! | `busbw_gbps@<bytes>` | the benchmark | all-reduce bus bandwidth at that message size, GB/s |
//! | `algbw_gbps@<bytes>` | the benchmark | algorithm bandwidth at that size, GB/s |
//! | `time_us@<bytes>` | the benchmark | mean time of one all-reduce at that size, µs |
//! | `wrong@<bytes>` | the benchmark | elements that failed validation at that size |
//! | `dataset_bytes`, `model_bytes` | the benchmark | bytes the initializers staged under `/workspace/dataset`, `/workspace/model` |
//! | `step` | the trainer | steps done (the next step to train) |
//! | `loss` | the trainer | latest loss |
//! | `samples_per_second` | the trainer | throughput of this process's steps |
//! | `checkpoint_step` | the trainer | step of the newest checkpoint written (0: none yet) |
//! | `checkpoint_bytes`, `checkpoint_write_ms` | the trainer | size and write time of that checkpoint |
//! | `resumed_from_step` | the trainer | step of the checkpoint this process resumed from (absent on a fresh start) |
//!
//! ```
//! use kubetrain_acceptance::metrics::{self, TrainerMetrics};
//! let posted = [("busbw_gbps@1024", "1.5"), ("algbw_gbps@1024", "0.75"), ("time_us@1024", "2.0"), ("wrong@1024", "0")];
//! let m = TrainerMetrics::from_pairs(posted.iter().map(|(k, v)| (k.to_string(), v.to_string())));
//! let rows = metrics::bench_rows(&m);
//! assert_eq!((rows[0].size, rows[0].busbw), (1024, 1.5));
//! ```

use std::collections::BTreeMap;

use serde_json::Value;

use crate::report::BenchPoint;

/// Steps done.
pub const STEP: &str = "step";
/// Latest loss.
pub const LOSS: &str = "loss";
/// Training throughput.
pub const SAMPLES_PER_SECOND: &str = "samples_per_second";
/// Step of the newest checkpoint written.
pub const CHECKPOINT_STEP: &str = "checkpoint_step";
/// Size of that checkpoint, bytes.
pub const CHECKPOINT_BYTES: &str = "checkpoint_bytes";
/// Write time of that checkpoint, ms.
pub const CHECKPOINT_WRITE_MS: &str = "checkpoint_write_ms";
/// Step of the checkpoint a restarted trainer resumed from.
pub const RESUMED_FROM_STEP: &str = "resumed_from_step";
/// Bytes staged by the dataset initializer.
pub const DATASET_BYTES: &str = "dataset_bytes";
/// Bytes staged by the model initializer.
pub const MODEL_BYTES: &str = "model_bytes";
/// Prefix of the per-size bus bandwidth.
pub const BUSBW_PREFIX: &str = "busbw_gbps@";
/// Prefix of the per-size algorithm bandwidth.
pub const ALGBW_PREFIX: &str = "algbw_gbps@";
/// Prefix of the per-size time.
pub const TIME_US_PREFIX: &str = "time_us@";
/// Prefix of the per-size wrong-element count.
pub const WRONG_PREFIX: &str = "wrong@";

/// One `trainerStatus.metrics` list, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrainerMetrics(pub BTreeMap<String, String>);

impl TrainerMetrics {
    /// From name/value pairs (a later duplicate wins).
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        TrainerMetrics(pairs.into_iter().collect())
    }

    /// From a `trainerStatus` object as JSON (`{"metrics": [{"name", "value"}]}`); empty when absent.
    pub fn from_trainer_status(status: &Value) -> Self {
        let pairs = status
            .get("metrics")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| {
                Some((
                    m.get("name")?.as_str()?.to_string(),
                    m.get("value")?.as_str()?.to_string(),
                ))
            });
        Self::from_pairs(pairs)
    }

    /// A metric as a number (`None` when absent or not a number).
    pub fn f64(&self, name: &str) -> Option<f64> {
        self.0
            .get(name)
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite())
    }

    /// A metric as a whole number (`12`, also `12.0`).
    pub fn u64(&self, name: &str) -> Option<u64> {
        self.f64(name)
            .filter(|v| *v >= 0.0 && v.fract() == 0.0 && *v < 1.8e19)
            .map(|v| v as u64)
    }
}

/// The benchmark's metrics for one row, as `(name, value)` pairs (what `kubetrain collective bench`
/// posts; `count` is not sent: it is `bytes / 4` for the f32 all-reduce).
pub fn bench_pairs(
    bytes: u64,
    time_us: f64,
    algbw: f64,
    busbw: f64,
    wrong: u64,
) -> [(String, String); 4] {
    [
        (format!("{BUSBW_PREFIX}{bytes}"), format!("{busbw:.4}")),
        (format!("{ALGBW_PREFIX}{bytes}"), format!("{algbw:.4}")),
        (format!("{TIME_US_PREFIX}{bytes}"), format!("{time_us:.2}")),
        (format!("{WRONG_PREFIX}{bytes}"), wrong.to_string()),
    ]
}

/// The nccl-tests table from the benchmark's metrics, by size; a size needs its `busbw_gbps@` entry.
pub fn bench_rows(m: &TrainerMetrics) -> Vec<BenchPoint> {
    let mut rows: Vec<BenchPoint> =
        m.0.keys()
            .filter_map(|k| k.strip_prefix(BUSBW_PREFIX)?.parse::<u64>().ok())
            .map(|size| BenchPoint {
                size,
                count: size / 4,
                time_us: m.f64(&format!("{TIME_US_PREFIX}{size}")).unwrap_or(0.0),
                algbw: m.f64(&format!("{ALGBW_PREFIX}{size}")).unwrap_or(0.0),
                busbw: m.f64(&format!("{BUSBW_PREFIX}{size}")).unwrap_or(0.0),
                wrong: m.u64(&format!("{WRONG_PREFIX}{size}")).unwrap_or(0),
            })
            .collect();
    rows.sort_by_key(|r| r.size);
    rows
}

/// What one trainer update says about training.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TrainerSample {
    /// [`STEP`].
    pub step: Option<u64>,
    /// [`LOSS`].
    pub loss: Option<f64>,
    /// [`SAMPLES_PER_SECOND`].
    pub samples_per_second: Option<f64>,
    /// [`CHECKPOINT_STEP`].
    pub checkpoint_step: Option<u64>,
    /// [`CHECKPOINT_BYTES`].
    pub checkpoint_bytes: Option<u64>,
    /// [`CHECKPOINT_WRITE_MS`].
    pub checkpoint_write_ms: Option<f64>,
    /// [`RESUMED_FROM_STEP`].
    pub resumed_from_step: Option<u64>,
}

impl TrainerSample {
    /// Reads the training metrics.
    pub fn of(m: &TrainerMetrics) -> Self {
        TrainerSample {
            step: m.u64(STEP),
            loss: m.f64(LOSS),
            samples_per_second: m.f64(SAMPLES_PER_SECOND),
            checkpoint_step: m.u64(CHECKPOINT_STEP).filter(|s| *s > 0),
            checkpoint_bytes: m.u64(CHECKPOINT_BYTES),
            checkpoint_write_ms: m.f64(CHECKPOINT_WRITE_MS),
            resumed_from_step: m.u64(RESUMED_FROM_STEP),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bench_pairs_round_trip_into_rows() {
        let mut pairs = Vec::new();
        for (bytes, busbw) in [(4096u64, 0.5), (8u64, 0.001), (1 << 20, 2.25)] {
            pairs.extend(bench_pairs(bytes, 12.5, busbw / 2.0, busbw, 0));
        }
        pairs.push(("loss".into(), "0.1".into()));
        let rows = bench_rows(&TrainerMetrics::from_pairs(pairs));
        let sizes: Vec<u64> = rows.iter().map(|r| r.size).collect();
        assert_eq!(sizes, [8, 4096, 1 << 20]);
        assert_eq!(rows[2].busbw, 2.25);
        assert_eq!(rows[2].algbw, 1.125);
        assert_eq!(rows[2].count, 1 << 18);
        assert_eq!(rows[0].time_us, 12.5);
    }

    #[test]
    fn trainer_status_metrics_read_leniently() {
        let status = json!({"metrics": [
            {"name": "step", "value": "40"},
            {"name": "loss", "value": "0.25"},
            {"name": "checkpoint_step", "value": "0"},
            {"name": "resumed_from_step", "value": "20.0"},
            {"name": "samples_per_second", "value": "fast"},
            {"value": "no name"},
        ]});
        let s = TrainerSample::of(&TrainerMetrics::from_trainer_status(&status));
        assert_eq!(s.step, Some(40));
        assert_eq!(s.loss, Some(0.25));
        // 0 means "no checkpoint yet".
        assert_eq!(s.checkpoint_step, None);
        assert_eq!(s.resumed_from_step, Some(20));
        assert_eq!(s.samples_per_second, None);
        assert_eq!(
            TrainerMetrics::from_trainer_status(&json!(null)),
            TrainerMetrics::default()
        );
    }
}
