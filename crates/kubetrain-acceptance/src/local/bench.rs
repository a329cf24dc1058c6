//! Step 3 in local mode: the benchmark job's pods run `kubetrain collective bench`; rank 0's JSON lines
//! are the nccl-tests table.

use kubetrain_client::JobStatus;
use kubetrain_client::local::{JobPlan, RunEvent};
use serde_json::Value;

use super::stop::{Stop, run_plan};
use crate::report::BenchPoint;
use crate::runner::Benched;

/// One row of the table from a line of rank 0, when it is one.
fn row(line: &str) -> Option<BenchPoint> {
    let v = serde_json::from_str::<Value>(line).ok()?;
    v.get("op")?;
    Some(BenchPoint {
        size: v["bytes"].as_u64().unwrap_or(0),
        count: v["count"].as_u64().unwrap_or(0),
        time_us: v["time_us"].as_f64().unwrap_or(0.0),
        algbw: v["algbw_gbps"].as_f64().unwrap_or(0.0),
        busbw: v["busbw_gbps"].as_f64().unwrap_or(0.0),
        wrong: v["wrong"].as_u64().unwrap_or(0),
    })
}

/// Runs the benchmark job to its end.
pub(super) async fn run(plan: &JobPlan, stop: &Stop) -> Benched {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let summary = run_plan(plan, stop, |event, _| match event {
        RunEvent::Log(l) if !l.stderr && l.pod.ends_with("-0-0") => rows.extend(row(&l.line)),
        RunEvent::Log(l) if l.stderr => notes.push(format!("{}: {}", l.pod, l.line)),
        _ => {}
    })
    .await;
    Benched {
        rows,
        complete: summary.status == JobStatus::Complete,
        end_message: summary.message,
        last_stderr: notes.pop(),
        extra: serde_json::Map::new(),
    }
}

/// The step's message when the pods did not finish cleanly.
pub(super) fn failure(b: &Benched, wrong: u64) -> String {
    format!(
        "the benchmark pods did not finish cleanly: {} ({} rows, {wrong} wrong elements){}",
        b.end_message,
        b.rows.len(),
        b.last_stderr
            .as_ref()
            .map(|n| format!("; last stderr: {n}"))
            .unwrap_or_default()
    )
}
