//! The seven steps on this machine, for real: the local queue (Kueue's model of this machine), the
//! initializers against an S3 source, the collective benchmark and the trainer as the TrainJob's own
//! pods (local processes through the local runner), a pod deleted with SIGKILL and the run restarted
//! as JobSet's `failurePolicy` would, resuming from the checkpoint.
//!
//! [`run`] drives the shared step runner over the local backend; this module queues the job, its
//! submodules stage the sources (`staging`), run the benchmark (`bench`) and the training with the
//! deletion (`training`), and stop every pod on Ctrl-C (`stop`).

mod bench;
mod staging;
mod stop;
mod training;

use std::path::{Path, PathBuf};
use std::time::Instant;

use kubetrain_client::local::capacity::Capacity;
use kubetrain_client::local::queue::{LocalQueue, Ticket};
use kubetrain_client::local::{self, JobPlan, LocalOptions};
use serde_json::{Value, json};

use crate::error::StepFailure;
use crate::plan::Plan;
use crate::report::Report;
use crate::runner::{self, Backend, Benched, Queued, Staged, Trained};
use crate::steps::{self, Steps};
use crate::trainjob::{bench_command, trainer_mut};
use stop::Stop;

/// How to run.
#[derive(Debug, Clone)]
pub struct LocalRun {
    /// This run's own directory, new and empty (see [`crate::outdir`]): the report (`acceptance.json`,
    /// `acceptance.html`, `labels.txt`), the pods' `run/`, relative checkpoint locations.
    pub out_dir: PathBuf,
    /// The `kubetrain` binary the pods run.
    pub kubetrain_exe: PathBuf,
}

/// Runs the seven steps; `progress` gets one line per step (and a few notes). Ctrl-C or SIGTERM stops
/// every pod and skips the remaining steps (`interrupted` in the report).
pub async fn run(plan: &Plan, opts: &LocalRun, progress: &mut (dyn FnMut(&str) + Send)) -> Report {
    let started = Instant::now();
    let mut steps = Steps::new(progress);
    let mut report = steps::new_report(plan, "local", json!({}));
    let mut backend = LocalBackend::new(plan, opts);
    runner::run_steps(&mut backend, plan, &mut steps, &mut report).await;
    drop(backend);
    steps::conclude(report, steps.done, started)
}

/// The local backend: the job's pods are processes of the local runner.
struct LocalBackend<'a> {
    plan: &'a Plan,
    out_dir: PathBuf,
    /// The local runner's settings: the pods' `run/` in the run's directory, remapped ports.
    options: LocalOptions,
    stop: Stop,
    /// The benchmark job, planned by the queue step and run by the benchmark step.
    bench_plan: Option<JobPlan>,
    /// The admission (the local queue's ledger entry), held until the last pod ends.
    ticket: Option<Ticket>,
    admitted_at: Instant,
}

impl<'a> LocalBackend<'a> {
    fn new(plan: &'a Plan, opts: &LocalRun) -> Self {
        // `out_dir` is this run's own fresh directory (`outdir::create_run_dir`): nothing in it to clear.
        let options = LocalOptions {
            run_dir: Some(opts.out_dir.join("run")),
            kubetrain_exe: Some(opts.kubetrain_exe.clone()),
            remap_ports: true,
            ..LocalOptions::default()
        };
        LocalBackend {
            plan,
            out_dir: opts.out_dir.clone(),
            options,
            stop: Stop::install(),
            bench_plan: None,
            ticket: None,
            admitted_at: Instant::now(),
        }
    }

    /// Plans a TrainJob (with the runtimes) for the local runner.
    fn prepare(&self, yaml: &str) -> Result<JobPlan, StepFailure> {
        let catalog = kubetrain_jobset::builtin::catalog();
        local::prepare(yaml, &catalog, &self.options)
            .map_err(|e| StepFailure(format!("the TrainJob cannot be planned: {e}")))
    }

    /// Runs `work` while the admission is held (the ledger entry is kept fresh meanwhile).
    async fn holding<T>(ticket: &mut Option<Ticket>, work: impl Future<Output = T>) -> T {
        match ticket {
            Some(t) => t.hold_while(work).await,
            None => work.await,
        }
    }
}

impl Backend for LocalBackend<'_> {
    fn default_queue(&self) -> &'static str {
        "local"
    }

    fn out_dir(&self) -> &Path {
        &self.out_dir
    }

    fn interrupted(&self) -> Option<&'static str> {
        self.stop
            .stopped()
            .then_some("interrupted (Ctrl-C or SIGTERM): every pod was stopped")
    }

    async fn queue(&mut self, _steps: &mut Steps<'_>) -> Result<Queued, StepFailure> {
        let bench_plan = self.prepare(&bench_job_yaml(self.plan))?;
        let queued = enqueue(self.plan, &bench_plan, &self.stop).await;
        self.bench_plan = Some(bench_plan);
        let (ticket, queued) = queued;
        self.ticket = ticket;
        self.admitted_at = Instant::now();
        Ok(queued)
    }

    async fn stage(&mut self) -> Result<Staged, StepFailure> {
        let workspace = self.out_dir.join("run").join("workspace");
        let scratch = self.out_dir.join("loopback-sources");
        let work = staging::stage_all(self.plan, &workspace, &scratch);
        Ok(Self::holding(&mut self.ticket, work).await)
    }

    async fn benchmark(&mut self) -> Result<Benched, StepFailure> {
        let Some(bench_plan) = self.bench_plan.take() else {
            return Err(StepFailure("the benchmark job was not planned".into()));
        };
        let work = bench::run(&bench_plan, &self.stop);
        Ok(Self::holding(&mut self.ticket, work).await)
    }

    fn bench_failure(&self, b: &Benched, wrong: u64) -> String {
        bench::failure(b, wrong)
    }

    async fn train(&mut self, _steps: &mut Steps<'_>) -> Result<Trained, StepFailure> {
        let since = Instant::now();
        let job = training::prepare(self.plan, &self.out_dir, |yaml| self.prepare(yaml))?;
        let work = training::run(self.plan, job, &self.stop);
        let log = Self::holding(&mut self.ticket, work).await;
        Ok(training::judge(self.plan, log, since, self.admitted_at))
    }

    fn release(&mut self) {
        self.ticket = None;
    }
}

/// The local queue of the plan: its ledger (`spec.queue.dir`, else `KUBETRAIN_QUEUE_DIR`, else the
/// user's shared one) and its capacity (this machine, with the plan's `spec.queue.capacity`).
fn local_queue(plan: &Plan) -> (PathBuf, Capacity) {
    let spec = &plan.spec;
    let mut capacity = Capacity::of_this_machine();
    for (k, v) in &spec.queue.capacity {
        match (k.as_str(), v.parse::<u64>()) {
            ("cpu", Ok(n)) => capacity.cpu = n,
            ("gpu", Ok(n)) => capacity.gpus = n,
            ("memory", _) => capacity.memory = crate::plan::parse_size(v).ok().or(capacity.memory),
            _ => {}
        }
    }
    let dir = spec
        .queue
        .dir
        .as_ref()
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("KUBETRAIN_QUEUE_DIR").map(PathBuf::from))
        .unwrap_or_else(LocalQueue::default_dir);
    (dir, capacity)
}

/// Step 1: queues `bench_plan` and waits for its admission (or `maxQueueWait`, or Ctrl-C).
async fn enqueue(plan: &Plan, bench_plan: &JobPlan, stop: &Stop) -> (Option<Ticket>, Queued) {
    let since = Instant::now();
    let (dir, capacity) = local_queue(plan);
    let max_wait = plan.spec.thresholds.max_queue_wait.map(|d| d.0);
    let queue = LocalQueue::new(&dir, capacity.clone()).with_timeout(max_wait);
    let mut pending_reasons: Vec<String> = Vec::new();
    let ticket = match queue.enqueue(bench_plan) {
        Ok(mut ticket) => {
            let waited = tokio::select! {
                w = ticket.wait(|p| {
                    let r = p.to_string();
                    if pending_reasons.last() != Some(&r) {
                        pending_reasons.push(r);
                    }
                }) => w.map_err(|e| e.to_string()),
                () = stop.wait() => Err("interrupted while waiting in the queue".to_string()),
            };
            waited.map(|()| ticket)
        }
        Err(e) => Err(e.to_string()),
    };
    let wait = since.elapsed().as_secs_f64();
    let queue_name = plan.spec.queue.name.as_deref().unwrap_or("local");
    let measurements = json!({
        "queue": queue_name,
        "ledger": dir.display().to_string(),
        "capacity": {"cpu": capacity.cpu, "memory": capacity.memory, "gpu": capacity.gpus},
        "waitSeconds": wait,
        "pendingReasons": pending_reasons,
        "admission": if ticket.is_ok() { "admitted by ClusterQueue local on ResourceFlavor this-machine" } else { "not admitted" },
    });
    let admitted = ticket.as_ref().map(|_| {
        let waited = pending_reasons.first().map(|r| format!("; waited: {r}"));
        format!(
            "admitted by ClusterQueue local (flavor this-machine) after {}{}",
            crate::units::duration(wait),
            waited.unwrap_or_default()
        )
    });
    let queued = Queued {
        since,
        wait,
        admitted: admitted.map_err(Clone::clone),
        measurements,
    };
    (ticket.ok(), queued)
}

/// The TrainJob (and runtimes) as a YAML stream for the local runner, with the trainer's command or
/// env changed by `edit`.
fn job_yaml(plan: &Plan, edit: impl FnOnce(&mut Value)) -> String {
    let mut job = plan.spec.train_job.clone();
    edit(&mut job);
    let mut docs: Vec<String> = plan
        .spec
        .runtimes
        .iter()
        .map(|r| serde_json::to_string(r).unwrap_or_default())
        .collect();
    docs.push(serde_json::to_string(&job).unwrap_or_default());
    docs.join("\n---\n")
}

/// The benchmark step's TrainJob (and runtimes) for the local runner: the plan's job running [`bench_command`].
fn bench_job_yaml(plan: &Plan) -> String {
    job_yaml(plan, |job| {
        trainer_mut(job).insert("command".into(), bench_command(plan));
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_bench_job_runs_the_command_a_cluster_run_gives_its_bench_job() {
        let plan = Plan::from_yaml(&crate::plan::tests::MINIMAL.replace(
            "  training:",
            "  benchmark: {minBytes: 64, maxBytes: 1Ki, iters: 4, warmup: 1}\n  training:",
        ))
        .unwrap();
        let yaml = bench_job_yaml(&plan);
        let job: Value = serde_json::from_str(yaml.rsplit("\n---\n").next().unwrap()).unwrap();
        let command = &job["spec"]["trainer"]["command"];
        let expected = json!([
            "kubetrain",
            "collective",
            "bench",
            "--backend",
            "cpu",
            "--op",
            "all_reduce",
            "--min-bytes",
            "64",
            "--max-bytes",
            "1024",
            "--iters",
            "4",
            "--warmup",
            "1",
            "--output",
            "json"
        ]);
        assert_eq!(command, &expected);
        let (cluster_bench, _) = crate::cluster::trainjobs_of(&plan, "team");
        assert_eq!(command, &cluster_bench["spec"]["trainer"]["command"]);
        // Everything else is the plan's TrainJob as written.
        assert_eq!(job["spec"]["trainer"]["numNodes"], 2);
        assert_eq!(job["metadata"]["name"], "t");
    }
}
