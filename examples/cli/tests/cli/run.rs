//! `kubetrain run` as a user runs it: the quick start on this machine, a failing rank, and concurrent runs
//! queueing for a small (declared) capacity.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{arg, command, kubetrain, quickstart, text};

/// A TrainJob `name` on torch-distributed whose trainer is `trainer` (a YAML flow mapping's content).
fn trainjob(name: &str, trainer: &str) -> String {
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}}}\nspec:\n  \
         runtimeRef: {{name: torch-distributed}}\n  trainer: {{{trainer}}}\n"
    )
}

/// Writes `yaml` to `dir/<file>` and returns the `kubetrain run` arguments for it, its run directory being
/// `dir/<file>.run`, followed by `extra`.
fn run_args(dir: &Path, file: &str, yaml: &str, extra: &[&str]) -> Vec<String> {
    let job = dir.join(file);
    std::fs::write(&job, yaml).unwrap();
    let run_dir = dir.join(format!("{file}.run"));
    let mut args: Vec<String> = ["run", "-f", arg(&job), "--run-dir", arg(&run_dir)]
        .map(String::from)
        .into();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// Runs `yaml` with `kubetrain run` in a fresh temporary directory.
fn run_job(yaml: &str, extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let args = run_args(dir.path(), "job.yaml", yaml, extra);
    kubetrain(&args.iter().map(String::as_str).collect::<Vec<_>>(), None)
}

#[test]
fn quickstart_runs_every_rank_and_the_loss_goes_down() {
    let dir = tempfile::tempdir().unwrap();
    let out = kubetrain(
        &["run", "-f", &quickstart(), "--run-dir", arg(dir.path())],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for rank in 0..2 {
        assert!(
            stdout.contains(&format!("quickstart-node-0-{rank} | started")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!(
                "quickstart-node-0-{rank} | Succeeded (exit code 0)"
            )),
            "{stdout}"
        );
    }
    // Rank 0 reports the averaged loss of both ranks at every step; it must fall.
    let losses: Vec<f64> = stdout
        .lines()
        .filter_map(|l| l.split_once(" loss ").map(|(_, v)| v.trim()))
        .filter_map(|v| v.parse().ok())
        .collect();
    assert!(losses.len() >= 2, "{stdout}");
    assert!(losses.last().unwrap() < &(losses[0] / 10.0), "{losses:?}");
    assert!(stdout.contains("2 ranks"), "{stdout}");
    assert!(stdout.contains("TrainJob quickstart Complete"), "{stdout}");
    assert!(
        text(&out.stderr).contains("is ignored"),
        "the image notice is shown"
    );
}

#[test]
fn a_failing_rank_fails_the_run_with_its_log_tail() {
    let script =
        "if [ $PET_NODE_RANK = 1 ]; then echo fatal: rank 1 lost its data; exit 7; fi; sleep 60";
    let out = run_job(
        &trainjob(
            "failing",
            &format!("numNodes: 2, command: [sh, -c, {script:?}]"),
        ),
        &[],
    );
    let stdout = text(&out.stdout);
    // Rank 0 was stopped, not waited for (its sleep 60): an event in the output, not a wall-clock bound.
    assert!(
        stdout.contains("failing-node-0-0 | Failed (stopped by the runner)"),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("last 1 log lines of failing-node-0-1:\n  fatal: rank 1 lost its data"),
        "{stdout}"
    );
    assert!(stdout.contains("TrainJob failing Failed"), "{stdout}");
    assert!(
        stdout.contains("pod failing-node-0-1 failed (exit code 7)"),
        "{stdout}"
    );
}

#[test]
fn an_invalid_trainjob_is_refused_with_its_field_path() {
    let out = run_job(
        &trainjob(
            "bad",
            "command: [\"true\"], env: [{name: PET_NODE_RANK, value: '0'}]",
        ),
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("spec.trainer.env"), "{stderr}");
    assert!(stderr.contains("PET_NODE_RANK"), "{stderr}");
}

#[test]
fn a_job_needing_gpus_this_machine_lacks_is_refused_with_kueues_reason() {
    // A declared capacity without GPUs, so the test holds on machines with GPUs too.
    let gpu = trainjob(
        "gpu",
        "numNodes: 2, command: [\"true\"], resourcesPerNode: {limits: {nvidia.com/gpu: 1}}",
    );
    let queue = tempfile::tempdir().unwrap();
    let out = run_job(
        &gpu,
        &["--capacity", "gpu=0", "--queue-dir", arg(queue.path())],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("cannot run on this machine"), "{stderr}");
    // The ML engineer's terms first, Kueue's reason second.
    assert!(
        stderr.contains(
            "cannot run on this machine: needs 2 GPUs (2 nodes × 1); this machine has 0 (Kueue: "
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("insufficient quota for nvidia.com/gpu"),
        "{stderr}"
    );
    assert!(text(&out.stdout).is_empty(), "nothing started");
}

#[test]
fn kubetrain_inside_a_shell_command_is_this_binary() {
    let out = run_job(
        &trainjob(
            "shell",
            "numNodes: 2, command: [sh, -c, \"kubetrain collective train-demo --steps 3\"]",
        ),
        &[],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("shell-node-0-0 | done: final loss"),
        "{stdout}"
    );
}

/// A one-pod job asking for 2 cores, running `script`, as `kubetrain run` arguments on a declared 2-core
/// machine whose queue ledger lives in `queue`.
fn two_core_run(dir: &Path, queue: &Path, name: &str, script: &str, extra: &[&str]) -> Vec<String> {
    let yaml = trainjob(
        name,
        &format!("command: [sh, -c, {script:?}], resourcesPerNode: {{requests: {{cpu: '2'}}}}"),
    );
    let mut more = vec!["--capacity", "cpu=2", "--queue-dir", arg(queue)];
    more.extend_from_slice(extra);
    run_args(dir, &format!("{name}.yaml"), &yaml, &more)
}

fn spawn(args: &[String]) -> Child {
    command()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubetrain starts")
}

/// Polls the files another process writes until `seen` holds, giving up after 120 s with "never saw `what`".
fn wait_until(what: &str, seen: impl Fn() -> bool) {
    let start = Instant::now();
    while !seen() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never saw {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the queue ledger in `queue` satisfies `ready`.
fn wait_for_ledger(queue: &Path, what: &str, ready: impl Fn(&str) -> bool) {
    let ledger: PathBuf = queue.join("ledger.json");
    wait_until(what, || {
        std::fs::read_to_string(&ledger).is_ok_and(|l| ready(&l))
    });
}

#[test]
fn concurrent_runs_queue_for_the_declared_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let queue = dir.path().join("queue");
    let release = dir.path().join("release");
    let marker = dir.path().join("first-done");
    // The first run holds the 2 cores until the test releases it.
    let hold = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; touch {}",
        release.display(),
        marker.display()
    );
    let first = spawn(&two_core_run(dir.path(), &queue, "first", &hold, &[]));
    wait_for_ledger(&queue, "the first run admitted", |l| {
        l.contains("\"admitted\"")
    });

    // The second waits for the first, shows why, and starts once it is done.
    let check = format!("test -e {} && echo after-first", marker.display());
    let second = spawn(&two_core_run(dir.path(), &queue, "second", &check, &[]));
    wait_for_ledger(&queue, "the second run queued", |l| {
        l.contains("default/second")
    });
    // A third gives up quickly; a fourth is interrupted while waiting; a fifth skips the queue.
    let impatient = two_core_run(
        dir.path(),
        &queue,
        "impatient",
        "true",
        &["--queue-timeout", "300ms"],
    );
    let timed_out = kubetrain(
        &impatient.iter().map(String::as_str).collect::<Vec<_>>(),
        None,
    );
    let interrupted = spawn(&two_core_run(
        dir.path(),
        &queue,
        "interrupted",
        "true",
        &[],
    ));
    wait_for_ledger(&queue, "the interrupted run queued", |l| {
        l.contains("default/interrupted")
    });
    let sigint = Command::new("kill")
        .args(["-INT", &interrupted.id().to_string()])
        .status()
        .unwrap();
    assert!(sigint.success());
    let interrupted = interrupted.wait_with_output().unwrap();
    let unqueued = two_core_run(
        dir.path(),
        &queue,
        "unqueued",
        "echo started",
        &["--no-queue"],
    );
    let unqueued = kubetrain(
        &unqueued.iter().map(String::as_str).collect::<Vec<_>>(),
        None,
    );
    std::fs::write(&release, "").unwrap();

    let first = first.wait_with_output().unwrap();
    let second = second.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", text(&first.stderr));
    let out = text(&second.stdout);
    assert!(second.status.success(), "{out}\n{}", text(&second.stderr));
    assert!(
        out.contains("Pending: couldn't assign flavors to pod set node: insufficient unused quota for cpu in flavor this-machine"),
        "{out}"
    );
    assert!(out.contains("(position 1 of "), "{out}");
    assert!(out.contains("admitted by the local queue after"), "{out}");
    assert!(out.contains("second-node-0-0 | after-first"), "{out}");
    assert!(out.find("Pending:") < out.find("running TrainJob"), "{out}");

    let (stdout, stderr) = (text(&timed_out.stdout), text(&timed_out.stderr));
    assert_eq!(timed_out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("TrainJob default/impatient was not admitted within"),
        "{stderr}"
    );
    assert!(stdout.contains("(position 2 of 2 waiting)"), "{stdout}");

    let stderr = text(&interrupted.stderr);
    assert_eq!(interrupted.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted while waiting in the local queue"));

    assert!(unqueued.status.success(), "{}", text(&unqueued.stderr));
    let stdout = text(&unqueued.stdout);
    assert!(stdout.contains("unqueued-node-0-0 | started") && !stdout.contains("Pending:"));

    // Every run ended: the ledger holds none of them.
    let ledger = std::fs::read_to_string(queue.join("ledger.json")).unwrap();
    assert!(!ledger.contains("default/"), "{ledger}");
}

#[test]
fn bad_queue_flags_are_refused_with_the_fix() {
    let table = [
        (vec!["--queue-timeout", "soon"], "not a duration"),
        (vec!["--queue-timeout", "5d"], "unknown unit"),
        (
            vec!["--capacity", "cpu=lots"],
            "not a whole number of cores",
        ),
        (vec!["--capacity", "disk=1"], "use cpu, memory or gpu"),
        (vec!["--capacity", "memory=12X"], "memory"),
        (vec!["--queueing-strategy", "LIFO"], "StrictFIFO"),
    ];
    for (flags, want) in table {
        let out = run_job(&trainjob("flags", "command: [\"true\"]"), &flags);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let err = text(&out.stderr);
        assert!(err.contains(want), "{flags:?}: {err}");
    }
}

#[test]
fn an_unusable_queue_directory_is_an_error_that_names_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let yaml = trainjob("blocked", "command: [\"true\"]");
    let out = run_job(&yaml, &["--queue-dir", arg(&not_a_dir.join("queue"))]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("creating the queue directory"), "{err}");
    assert!(
        err.contains("--queue-dir") && err.contains("--no-queue"),
        "{err}"
    );
    assert!(text(&out.stdout).is_empty(), "nothing started");
}

#[test]
fn a_second_run_of_the_same_job_is_refused_and_the_first_says_where_its_files_are() {
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let started = dir.path().join("started");
    let hold = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done; echo released",
        started.display(),
        release.display()
    );
    let args = run_args(
        dir.path(),
        "job.yaml",
        &trainjob("busy", &format!("command: [sh, -c, {hold:?}]")),
        &["--ignore-capacity"],
    );
    let first = spawn(&args);
    // Wait for the first run's pod to be up (an event: the file it writes).
    wait_until("the first run's pod start", || started.exists());
    let second = kubetrain(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("TrainJob default/busy is already running on this machine")
            && stderr.contains(&format!("pid {}", first.id())),
        "{stderr}"
    );
    std::fs::write(&release, "").unwrap();
    let first = first.wait_with_output().unwrap();
    let stdout = text(&first.stdout);
    assert!(first.status.success(), "{stdout}");
    let run_dir = dir.path().join("job.yaml.run");
    assert!(
        stdout.contains(&format!("run directory {}", run_dir.display()))
            && stdout.contains(&format!(
                "the pods' /workspace is {}",
                run_dir.join("workspace").display()
            )),
        "{stdout}"
    );
}

#[test]
fn a_daemon_that_left_its_pod_does_not_keep_the_run_going() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("daemon.pid");
    // The container exits at once; its daemon (own session, stdout still the pod's pipe) would sleep 600 s.
    let script = format!(
        "setsid sh -c 'echo $$$$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 600' & \
         while [ ! -e {p} ]; do sleep 0.01; done; echo parent-done",
        p = pid_file.display()
    );
    let out = run_job(
        &trainjob("daemon", &format!("command: [sh, -c, {script:?}]")),
        &["--ignore-capacity"],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("TrainJob daemon Complete"), "{stdout}");
    // `kubetrain run` has exited (the output is complete): the daemon did not outlive it.
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let alive = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
        .ok()
        .and_then(|stat| {
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next())
                .map(|state| state != "Z" && state != "X")
        })
        .unwrap_or(false);
    assert!(!alive, "the daemon (pid {}) outlived the run", pid.trim());
}

#[test]
fn zero_nodes_runs_nothing_and_says_so() {
    let out = run_job(
        &trainjob("empty", "numNodes: 0, command: [\"true\"]"),
        &["--ignore-capacity"],
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("numNodes is 0: the job runs no trainer pods"),
        "{stderr}"
    );
    assert!(
        stdout.contains(
            "TrainJob empty Complete (no trainer pod ran: numNodes is 0, so nothing was trained)"
        ),
        "{stdout}"
    );
}

#[test]
fn the_training_codes_progress_is_shown_and_the_run_is_kept() {
    // train-demo reports through the run's loopback status endpoint (KUBEFLOW_TRAINER_SERVER_*).
    let dir = tempfile::tempdir().unwrap();
    let out = kubetrain(
        &[
            "run",
            "-f",
            &quickstart(),
            "--run-dir",
            arg(dir.path()),
            "--ignore-capacity",
        ],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // Not a terminal: plain lines, the last report at 100% with no time left.
    let progress: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("progress: "))
        .collect();
    assert!(
        progress
            .last()
            .is_some_and(|l| l.starts_with("progress: [####################] 100%  ETA 0s  loss=")),
        "{progress:?}"
    );
    assert!(
        !stdout.contains('\r'),
        "no terminal control characters in a pipe"
    );
    assert!(
        stdout.contains("\nlast progress report: 100% done, about 0 s left; loss="),
        "{stdout}"
    );
    // The record and the logs per pod, for `kubetrain get|logs --local`.
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("run.json")).unwrap()).unwrap();
    assert_eq!(record["status"], "Complete");
    assert_eq!(record["trainerStatus"]["progressPercentage"], 100);
    let log = std::fs::read_to_string(dir.path().join("logs/quickstart-node-0-0.log")).unwrap();
    assert!(log.contains("train-demo: final progress reported"), "{log}");
}
