//! The GPU-cluster acceptance test as one call (`kubetrain acceptance run`): a plan
//! ([`plan::Plan`]) names the TrainJob, the queue, the dataset and model, the training window, the
//! checkpoints, the pod to delete, the labels, the cost inputs with a baseline and the thresholds; the
//! runner goes through seven steps and writes a report ([`report::Report`], JSON and HTML).
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
//!
//! 1. **queue** — the TrainJob is submitted through the queue (locally: the local queue, Kueue's model
//!    of this machine); wait and admission reason;
//! 2. **staging** — the dataset and model initializers fetch their sources; bytes, time, MB/s;
//! 3. **benchmark** — an all-reduce benchmark in the job's own pods; the nccl-tests table;
//! 4. **training** — the production command trains for the window with periodic checkpoints;
//!    samples/s, loss, checkpoint size and write time;
//! 5. **restore** — a pod is deleted after a checkpoint, the job restarts and must resume from that
//!    checkpoint's step (`resumed_from_step`), within the restore threshold;
//! 6. **labels** — GPU, network, storage, queue and cost labels;
//! 7. **cost** — `(compute + network + storage + support + idle + failed_runs + operations) /
//!    accepted_workload_units` against the baseline ([`cost`]).
//!
//! The steps are written once, over a backend: [`local::run`] runs them on this machine,
//! [`cluster::run`] through a cluster's API server; both judge the thresholds, print the progress lines
//! and fill the report the same way.
//!
//! ```
//! let plan = kubetrain_acceptance::plan::Plan::from_yaml("apiVersion: kubetrain.io/v1alpha1\nkind: AcceptancePlan\n")
//!     .unwrap_err();
//! assert!(plan.to_string().contains("metadata"));
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod chart;
pub mod checkpoint_advice;
pub mod cluster;
pub mod cost;
mod error;
pub mod local;
pub mod metrics;
pub mod outdir;
mod page;
pub mod plan;
pub mod report;
mod runner;
pub mod s3store;
mod steps;
mod ticks;
mod trainjob;
mod units;

pub use error::Error;

use std::path::Path;

/// Writes `acceptance.json` and `acceptance.html` into `dir`, and `labels.txt` (`key=value` lines) once
/// the result label is known.
pub fn write_report(report: &report::Report, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("acceptance.json"), json + "\n")?;
    if report
        .step("labels")
        .is_some_and(|s| s.verdict != report::StepVerdict::Skipped)
    {
        let text: String = report
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        std::fs::write(dir.join("labels.txt"), text)?;
    }
    std::fs::write(dir.join("acceptance.html"), page::render(report))
}

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
